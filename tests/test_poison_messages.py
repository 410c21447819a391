"""No message can wedge a consumer: one too large to dead-letter whole, one the DLQ cannot take, and a
connection closed for good (the service exits, so `yantra up` restarts it). Against a real nats-server."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import nats
import pytest
from nats.js import api
from nats.js.errors import APIError, NotFoundError

from services.cli import dlq_cmds
from services.core import dead_letters as dlq
from services.core import events as ev
from services.core.bus import DLQ_COPY_MAX_BYTES, RUNS_MAX_MSG_SIZE, Bus, EventRefused
from services.core.pb import events_pb2 as pb

ROOT = Path(__file__).resolve().parent.parent


def _request(run_id: str, prompt: str = "hi") -> ev.Envelope:
    msg = pb.RunRequested(model="tiny-qwen2", max_candidates=2, prompts=[prompt], decode_tokens=4)
    return ev.make_envelope(run_id, msg, producer="test", time_ns=time.time_ns(), event_id=f"req-{run_id}")


def _request_of_size(run_id: str, size: int) -> bytes:
    """A valid RunRequested envelope of exactly `size` bytes (its prompt fills it)."""
    base = len(ev.encode(_request(run_id, "")))
    n = size - base
    while (data := ev.encode(_request(run_id, "x" * n))) and len(data) > size:
        n -= len(data) - size
    assert len(data) == size
    return data


def _drained(bus: Bus, durable: str, last: int):
    """A check: the consumer has nothing pending, nothing to come back, and has acknowledged up to `last`."""

    async def check() -> bool:
        try:
            info = await bus.js.consumer_info(ev.RUNS_STREAM, durable)
        except NotFoundError:  # not made yet
            return False
        return (info.num_ack_pending, info.num_pending, info.ack_floor.stream_seq) == (0, 0, last)

    return check


async def _until(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        await asyncio.sleep(0.2)


# ---------------------------------------------------------------------- pure: what fits, what is refused


def test_a_dead_letter_copies_any_event_the_log_takes_whole_and_a_larger_message_in_part():
    max_payload = 1 << 20  # nats-server's default
    headers = dlq.dead_letter_headers("profiler", "é" * 5000, "yantra.run.r.RunRequested", stream="S", seq=7)
    largest = b"e" * RUNS_MAX_MSG_SIZE
    assert dlq.fit_copy(largest, headers, max_payload) == (largest, headers)  # with the longest reason there is

    big = bytes(range(256)) * 4096  # 1 MiB: the old limit of an event, which its copy could not meet
    data, marked = dlq.fit_copy(big, headers, max_payload)
    assert data == big[:DLQ_COPY_MAX_BYTES] and len(data) + dlq.headers_size(marked) <= max_payload
    assert marked[dlq.TRUNCATED] == "1" and marked[dlq.ORIGINAL_SIZE] == str(len(big))
    assert marked[dlq.ORIGINAL_SHA256] == hashlib.sha256(big).hexdigest()
    assert {k: marked[k] for k in headers} == headers  # why and where from are kept

    small_server = 64 << 10  # a server configured with less: the copy is cut to what it takes
    data, marked = dlq.fit_copy(largest, headers, small_server)
    assert 0 < len(data) and len(data) + dlq.headers_size(marked) <= small_server


async def test_an_event_larger_than_the_log_takes_is_refused_before_it_is_sent(own_bus, run_id):
    bus = own_bus
    info = (await bus.js.stream_info(ev.RUNS_STREAM)).config
    assert info.max_msg_size == RUNS_MAX_MSG_SIZE == 512 << 10 < bus.nc.max_payload

    too_big = _request(run_id, "x" * RUNS_MAX_MSG_SIZE)
    with pytest.raises(EventRefused) as err:
        await bus.publish(too_big)
    assert str(err.value).startswith(f"YANTRA_RUNS refused RunRequested of run {run_id}: ")
    assert "over the 524,288-byte limit of an event (RUNS_MAX_MSG_SIZE); nothing was sent" in str(err.value)
    assert "\n" not in str(err.value)
    assert bus.nc.is_connected and await bus.read_run(run_id) == []

    # What the log does accept can be dead-lettered whole: a message of ~1 MB is no longer stored at all.
    with pytest.raises(APIError) as refused:
        await bus.js.publish(ev.run_subject(run_id, "RunRequested"), b"\0" * 1_000_000)
    assert refused.value.err_code == 10054
    fits = _request_of_size(run_id, RUNS_MAX_MSG_SIZE - 100)
    assert await bus.publish(ev.decode(fits)) > 0


# ---------------------------------------------------------------------- real consumers


async def test_a_message_too_large_to_dead_letter_whole_is_copied_in_part_and_the_consumer_carries_on(own_nats, run_id):
    """~1 MiB messages stored by a log that took them (its old 1 MiB limit): one that is no event, and a valid
    RunRequested whose handler fails. Their dead letters, whole, were over the server's max_payload: the server
    closed the consumer's connection, for good. Now each is dead-lettered in part and the next message is handled."""
    nc = await nats.connect(own_nats.url)  # the log as the old limit made it
    js = nc.jetstream()
    await js.add_stream(
        api.StreamConfig(name=ev.RUNS_STREAM, subjects=[ev.RUN_SUBJECTS], max_msg_size=1 << 20, duplicate_window=600)
    )
    size = nc.max_payload - 64
    garbage = bytes(range(256)) * (size // 256) + b"\xff" * (size % 256)
    valid = _request_of_size(f"{run_id}-big", size)
    stored = [
        (await js.publish(ev.run_subject(run_id, "RunRequested"), garbage)).seq,
        (await js.publish(ev.run_subject(f"{run_id}-big", "RunRequested"), valid)).seq,
    ]
    await nc.close()

    bus = await Bus.connect(own_nats.url, name="profiler")  # brings the log's limit down; what it holds stays
    try:
        assert (await bus.js.stream_info(ev.RUNS_STREAM)).config.max_msg_size == RUNS_MAX_MSG_SIZE
        stop, handled = asyncio.Event(), []

        async def handler(rec):
            if rec.env.run_id == f"{run_id}-big":
                raise RuntimeError("the server cannot measure a prompt of a megabyte")
            handled.append(rec.env.run_id)

        durable = "profiler"
        subjects = [ev.run_filter("*", "RunRequested")]
        task = asyncio.create_task(bus.consume(durable, subjects, handler, stop, max_deliver=2, ack_wait=2))
        after = await bus.publish(_request(f"{run_id}-next"))

        async def settled() -> bool:
            return handled == [f"{run_id}-next"] and await bus.dead_letter_count() == 2

        await _until(settled, 30, "the next request handled and both large messages dead-lettered")
        assert bus.nc.is_connected and not bus.nc.is_closed and not task.done()
        await _until(_drained(bus, durable, after), 10, "nothing left pending or to come back")
        stop.set()
        await task

        letters = sorted(await bus.dead_letters(), key=lambda d: d.original_seq)
        assert [d.original_seq for d in letters] == stored
        for letter, original in zip(letters, (garbage, valid), strict=True):
            assert letter.truncated and len(letter.data) == DLQ_COPY_MAX_BYTES < len(original)
            assert letter.data == original[: len(letter.data)]
            assert letter.original_size == len(original) == int(letter.headers["Yantra-Original-Size"])
            assert letter.original_sha256 == hashlib.sha256(original).hexdigest()
            shown = "\n".join(dlq_cmds.show(letter))
            assert f"truncated: the first 524,288 of the original's {len(original):,} bytes" in shown
            assert f"the original's sha256 {hashlib.sha256(original).hexdigest()}" in shown
            assert f"[copy truncated: {len(original):,} bytes]" in dlq_cmds.line(letter)
        assert letters[0].reason.startswith("undecodable: not an Envelope")
        assert letters[1].reason.startswith("failed 2 times: RuntimeError('the server cannot measure")
    finally:
        await bus.close()


async def test_a_message_the_dlq_cannot_take_is_terminated_once_its_deliveries_are_spent(own_bus, run_id, caplog):
    """With no DLQ to copy it to, a poison message comes back until its deliveries are spent, then is terminated
    all the same, loudly. Left pending, it stayed unacknowledged for good (the server hands it out no more), and
    max_ack_pending of those stop a consumer."""
    bus = own_bus
    await bus.js.delete_stream(ev.DLQ_STREAM)  # every dead letter now fails: no stream takes yantra.dlq.>
    poison = (await bus.js.publish(ev.run_subject(run_id, "RunRequested"), b"\xde\xad not an event")).seq
    after = await bus.publish(_request(f"{run_id}-next"))
    stop, handled = asyncio.Event(), []

    async def handler(rec):
        handled.append(rec.seq)

    durable = f"nodlq-{run_id}"
    subjects = [ev.run_filter(run_id, "RunRequested"), ev.run_filter(f"{run_id}-next", "RunRequested")]
    with caplog.at_level(logging.CRITICAL, logger="services.core.bus"):
        task = asyncio.create_task(bus.consume(durable, subjects, handler, stop, max_deliver=2, ack_wait=2))
        try:
            await _until(_drained(bus, durable, after), 20, "the poison terminated")
        finally:
            stop.set()
            await task
    assert handled == [after]  # the next message was not held up behind it
    (record,) = [r for r in caplog.records if r.levelno == logging.CRITICAL]
    assert f"could not dead-letter seq {poison} on {ev.run_subject(run_id, 'RunRequested')} in 2 deliveries" in (
        record.getMessage()
    )
    assert "terminating it WITHOUT a DLQ copy" in record.getMessage()


# ---------------------------------------------------------------------- a connection closed for good


def _start_deafened(url: str, durable: str, hang: bool) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "YANTRA_ACK_WAIT_S"}
    pythonpath = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env |= {"NATS_URL": url, "DEAF_DURABLE": durable, "DEAF_HANG": "1" if hang else "0", "PYTHONPATH": pythonpath}
    cmd = [sys.executable, str(ROOT / "tests" / "deafened_service.py")]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("hang", [False, True], ids=["handler-returns", "handler-hangs"])
async def test_a_service_whose_connection_is_closed_for_good_exits_so_it_is_restarted(own_bus, own_nats, run_id, hang):
    """Status 1: `yantra up` restarts a service that exits so (2 would stop the stack). Whether its consumer
    notices (the handler returned) or only the watch on the connection can (the handler waits on something else)."""
    proc = _start_deafened(own_nats.url, f"deaf-{run_id}", hang)
    try:
        await own_bus.publish(_request(run_id))
        code = await asyncio.to_thread(proc.wait, 30)
    except subprocess.TimeoutExpired:
        raise AssertionError("the service stayed up, deaf, after its connection was closed") from None
    finally:
        if proc.poll() is None:
            proc.kill()
    out, err = proc.communicate()
    assert out.startswith("handling "), (out, err)
    assert code == 1, err
    assert "the NATS connection was closed for good (nats: maximum payload violation)" in err, err
