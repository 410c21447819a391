"""The bus against a real nats-server: ordering, dedup, consumers, redelivery, dead letters."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from nats.js import api

from services.core import events as ev
from services.core.bus import (
    ACK_WAIT_S,
    DLQ_DEDUP_WINDOW_S,
    DLQ_MAX_AGE_S,
    DLQ_MAX_BYTES,
    DLQ_MAX_MSGS,
    MAX_DELIVER,
    METRICS_MAX_AGE_S,
    METRICS_MAX_MSGS,
    RUNS_MAX_BYTES,
    RUNS_MAX_MSG_SIZE,
    Bus,
    BusUnavailable,
    EventRefused,
    Undecodable,
)
from services.core.nats_launcher import find_nats_server, free_port, start_nats
from services.core.pb import events_pb2 as pb
from services.core.runner import answer


def _request(run_id: str) -> ev.Envelope:
    msg = pb.RunRequested(model="tiny-qwen2", max_candidates=2, prompts=["hi"], decode_tokens=4)
    return ev.make_envelope(run_id, msg, producer="test", time_ns=time.time_ns(), event_id=f"req-{run_id}")


async def test_run_log_reads_back_in_order_and_dedups(bus, run_id):
    req = _request(run_id)
    await bus.publish(req)
    await bus.publish(req)  # a retried publish: same event id, dropped by the server
    for k in range(3):
        msg = pb.SkillCredited(skill_id=f"s{k}", reward=k)
        await bus.publish(ev.make_envelope(run_id, msg, producer="t", time_ns=k, causation_id=req.event_id, ordinal=k))
    got = await bus.read_run(run_id)
    assert [r.type for r in got] == ["RunRequested"] + ["SkillCredited"] * 3
    assert [r.msg.skill_id for r in got[1:]] == ["s0", "s1", "s2"]
    assert [r.seq for r in got] == sorted(r.seq for r in got)
    assert run_id in await bus.run_ids()


async def test_tail_yields_the_log_then_each_new_event_once_in_order(bus, run_id):
    import contextlib

    req = _request(run_id)
    await bus.publish(req)
    got: list[ev.Recorded] = []

    async def follow():
        async with contextlib.aclosing(bus.tail(ev.run_filter(run_id), poll_s=0.1)) as events:
            async for rec in events:
                got.append(rec)
                if len(got) == 4:
                    return

    task = asyncio.create_task(follow())
    await asyncio.sleep(0.3)  # the tail has read what was there and waits
    assert [r.type for r in got] == ["RunRequested"]
    for k in range(3):
        msg = pb.SkillCredited(skill_id=f"s{k}", reward=k)
        env = ev.make_envelope(run_id, msg, producer="t", time_ns=k, causation_id=req.event_id, ordinal=k)
        await bus.publish(env)
        await bus.publish(env)  # a duplicate publish is not a second event
    await asyncio.wait_for(task, timeout=10)
    assert [r.type for r in got] == ["RunRequested"] + ["SkillCredited"] * 3
    assert got == await bus.read_run(run_id)  # the same events, the same sequences


async def test_tail_of_a_run_that_has_no_events_yet_waits_for_them(bus, run_id):
    import contextlib

    async def first_event():
        async with contextlib.aclosing(bus.tail(ev.run_filter(run_id), poll_s=0.1)) as events:
            async for rec in events:
                return rec

    task = asyncio.create_task(first_event())
    await asyncio.sleep(0.5)  # several empty fetches time out meanwhile: none of them may end the tail
    assert not task.done()
    await bus.publish(_request(run_id))
    assert (await asyncio.wait_for(task, timeout=10)).type == "RunRequested"


async def test_read_of_unknown_run_is_empty(bus):
    assert await bus.read_run("nosuchrun") == []


class _Echo:
    name = "echo"
    consumes = ("RunRequested",)

    def __init__(self):
        self.calls = 0

    async def handle(self, trigger, prior):
        self.calls += 1
        return [pb.SkillCredited(skill_id="x", reward=len(prior))]


async def test_answer_is_idempotent(bus, run_id):
    req = _request(run_id)
    seq = await bus.publish(req)
    service = _Echo()
    trigger = ev.Recorded(seq, req)
    assert await answer(bus, service, trigger) == 1
    assert await answer(bus, service, trigger) == 0  # the run already holds the answer
    log = await bus.read_run(run_id)
    assert [r.type for r in log] == ["RunRequested", "SkillCredited"]
    assert log[1].env.causation_id == req.event_id
    assert log[1].env.event_id == ev.derived_event_id(run_id, req.event_id, "SkillCredited", 0)


async def test_consumer_dead_letters_undecodable_and_failing_messages(bus, run_id):
    stop = asyncio.Event()
    seen: list[str] = []

    async def handler(rec):
        seen.append(rec.type)
        raise RuntimeError("always fails")

    durable = f"dlq-{run_id}"
    task = asyncio.create_task(
        bus.consume(durable, [ev.run_filter(run_id, "RunRequested")], handler, stop, max_deliver=2, ack_wait=2)
    )
    await bus.js.publish(ev.run_subject(run_id, "RunRequested"), b"\xff\xfe not protobuf")
    await bus.publish(_request(run_id))
    deadline = time.monotonic() + 20
    letters = []
    while time.monotonic() < deadline:
        letters = await bus.read_dead_letters(durable)
        if len(letters) >= 2:
            break
        await asyncio.sleep(0.3)
    stop.set()
    await task
    reasons = sorted(h["Yantra-Reason"] for _, h in letters)
    assert len(letters) == 2, reasons
    assert reasons[0].startswith("failed 2 times") and reasons[1].startswith("undecodable")
    assert seen == ["RunRequested", "RunRequested"]  # retried once, then given up


# ---------------------------------------------------------------------- a stopped or killed consumer's work

ROOT = Path(__file__).resolve().parent.parent


def _start_hanging(url: str, durable: str, ack_wait_s: str | None, **extra: str) -> subprocess.Popen:
    """tests/hanging_service.py as its own process (`extra` more environment)."""
    env = {k: v for k, v in os.environ.items() if k != "YANTRA_ACK_WAIT_S"} | extra
    # ROOT first, the rest kept: where packages are installed beside the interpreter (a --target dir) counts too
    pythonpath = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env |= {"NATS_URL": url, "HANG_DURABLE": durable, "PYTHONPATH": pythonpath, "YANTRA_LOG_LEVEL": "WARNING"}
    if ack_wait_s is not None:
        env["YANTRA_ACK_WAIT_S"] = ack_wait_s
    cmd = [sys.executable, str(ROOT / "tests" / "hanging_service.py")]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_handling(proc: subprocess.Popen, timeout: float = 60.0) -> None:
    line = ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not line.startswith("handling"):
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            raise AssertionError(f"the hanging service exited {proc.returncode}: {proc.stderr.read()}")
    assert line.startswith("handling"), line


async def _seconds_until_redelivered(bus, durable: str, run_id: str, ack_wait: float, limit: float) -> float:
    """Consume the durable again here; seconds until its handler gets the run's request (fails past `limit`)."""
    stop, got = asyncio.Event(), asyncio.Event()

    async def handler(rec):
        got.set()

    started = time.monotonic()
    task = asyncio.create_task(
        bus.consume(durable, [ev.run_filter(run_id, "RunRequested")], handler, stop, ack_wait=ack_wait)
    )
    try:
        await asyncio.wait_for(got.wait(), limit)
        return time.monotonic() - started
    except TimeoutError:
        raise AssertionError(f"not redelivered within {limit} s") from None
    finally:
        stop.set()
        await task


async def test_a_killed_consumers_message_comes_back_within_the_short_default_ack_wait(own_bus, own_nats, run_id):
    durable = f"hang-{run_id}"
    proc = _start_hanging(own_nats.url, durable, ack_wait_s=None)  # the defaults, as `yantra up` runs services
    try:
        await own_bus.publish(_request(run_id))
        await asyncio.to_thread(_wait_handling, proc)
        await asyncio.sleep(2 * ACK_WAIT_S / 3)  # the in-progress heartbeat ran meanwhile
        proc.send_signal(signal.SIGKILL)  # no chance to hand the message back
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    info = await own_bus.js.consumer_info(ev.RUNS_STREAM, durable)
    assert info.config.ack_wait == ACK_WAIT_S == 5.0
    # Redelivered after the ack wait (counted from the last heartbeat, before the kill), not 30 s later.
    took = await _seconds_until_redelivered(own_bus, durable, run_id, ACK_WAIT_S, limit=10)
    assert took <= 7, took


async def test_a_service_stopped_by_sigterm_hands_its_message_back_at_once(own_bus, own_nats, run_id):
    durable = f"hang-{run_id}"
    proc = _start_hanging(own_nats.url, durable, ack_wait_s="30")  # so only a NAK can bring it back quickly
    try:
        await own_bus.publish(_request(run_id))
        await asyncio.to_thread(_wait_handling, proc)
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 20) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    took = await _seconds_until_redelivered(own_bus, durable, run_id, 30.0, limit=8)
    assert took < 3, took


async def test_setting_stop_mid_work_hands_the_message_back(bus, run_id):
    stop, started = asyncio.Event(), asyncio.Event()

    async def hang(rec):
        started.set()
        await asyncio.Event().wait()

    durable = f"stop-{run_id}"
    subjects = [ev.run_filter(run_id, "RunRequested")]
    task = asyncio.create_task(bus.consume(durable, subjects, hang, stop, ack_wait=30))
    await bus.publish(_request(run_id))
    await asyncio.wait_for(started.wait(), 10)
    stop.set()
    await asyncio.wait_for(task, 5)  # the handler is not waited for
    took = await _seconds_until_redelivered(bus, durable, run_id, 30.0, limit=8)
    assert took < 3, took


async def _old_durable(bus, durable: str, run_id: str, ack_policy: api.AckPolicy) -> None:
    """A durable as an older version made it (30 s ack wait), which has acknowledged the first of two events."""
    cfg = api.ConsumerConfig(
        durable_name=durable,
        ack_policy=ack_policy,
        deliver_policy=api.DeliverPolicy.ALL,
        max_deliver=MAX_DELIVER,
        ack_wait=30.0,
        filter_subjects=[ev.run_filter(run_id, "RunRequested")],
        max_ack_pending=64,
    )
    await bus.js.add_consumer(ev.RUNS_STREAM, cfg)
    psub = await bus.js.pull_subscribe_bind(durable=durable, stream=ev.RUNS_STREAM)
    (first,) = await psub.fetch(1, timeout=5)
    await first.ack()
    await bus.nc.flush()
    await psub.unsubscribe()


async def _consume_once(bus, durable: str, run_id: str) -> list[str]:
    """What a consumer with today's settings gets from the durable within a few seconds (event ids)."""
    stop, seen = asyncio.Event(), []

    async def handler(rec):
        seen.append(rec.env.event_id)

    task = asyncio.create_task(bus.consume(durable, [ev.run_filter(run_id, "RunRequested")], handler, stop))
    await asyncio.sleep(3)
    stop.set()
    await task
    return seen


async def test_an_existing_durable_gets_the_new_ack_wait_and_keeps_its_position(bus, run_id):
    reqs = [_request(run_id), ev.make_envelope(run_id, pb.RunRequested(model="m"), producer="t", time_ns=1)]
    for env in reqs:
        await bus.publish(env)
    durable = f"old-{run_id}"
    await _old_durable(bus, durable, run_id, api.AckPolicy.EXPLICIT)
    assert await _consume_once(bus, durable, run_id) == [reqs[1].event_id]  # the acknowledged one is not back
    info = await bus.js.consumer_info(ev.RUNS_STREAM, durable)
    assert info.config.ack_wait == ACK_WAIT_S == 5.0 and info.config.deliver_policy == api.DeliverPolicy.ALL


async def test_a_durable_that_cannot_be_updated_in_place_is_made_again_at_its_ack_floor(bus, run_id):
    reqs = [_request(run_id), ev.make_envelope(run_id, pb.RunRequested(model="m"), producer="t", time_ns=1)]
    for env in reqs:
        await bus.publish(env)
    durable = f"oldall-{run_id}"
    await _old_durable(bus, durable, run_id, api.AckPolicy.ALL)  # an ack policy is fixed at creation
    assert await _consume_once(bus, durable, run_id) == [reqs[1].event_id]
    info = await bus.js.consumer_info(ev.RUNS_STREAM, durable)
    assert info.config.ack_policy == api.AckPolicy.EXPLICIT and info.config.ack_wait == ACK_WAIT_S


# ---------------------------------------------------------------------- dead letters, limits, undecodable entries


async def _wait_dead_letters(bus, count: int, timeout: float = 30.0, settle_s: float = 2.0) -> list:
    """The DLQ once it holds `count` entries and has held still for `settle_s` (so extra copies would show)."""
    deadline = time.monotonic() + timeout
    while (n := await bus.dead_letter_count()) < count and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    assert n >= count, f"{n} dead letters, expected {count}"
    await asyncio.sleep(settle_s)
    return await bus.dead_letters()


async def test_each_poison_message_is_dead_lettered_once_with_where_and_why(own_bus, run_id):
    bus, stop, seen = own_bus, asyncio.Event(), []

    async def fails(rec):
        seen.append(rec.type)
        raise RuntimeError("this handler always fails")

    subjects = [ev.run_filter(run_id, "RunRequested"), ev.run_filter(run_id, "CandidateJudged")]
    tasks = [asyncio.create_task(bus.consume(d, subjects, fails, stop, max_deliver=2)) for d in ("svc-a", "svc-b")]
    garbage = []
    for k in range(10):
        for type_name in ("RunRequested", "CandidateJudged"):
            ack = await bus.js.publish(ev.run_subject(run_id, type_name), b"\xff\xfe garbage %d" % k)
            garbage.append(ack.seq)
    wrong = ev.make_envelope(run_id, pb.SkillCredited(skill_id="s"), producer="t", time_ns=1)  # on another subject
    garbage.append((await bus.js.publish(ev.run_subject(run_id, "CandidateJudged"), ev.encode(wrong))).seq)
    failing = await bus.publish(_request(run_id))
    letters = await _wait_dead_letters(bus, len(garbage) + 2)
    stop.set()
    await asyncio.gather(*tasks)

    assert len(letters) == len(garbage) + 2, [d.headers.get("Nats-Msg-Id") for d in letters]
    undecodable = sorted((d for d in letters if d.original_seq in garbage), key=lambda d: d.original_seq)
    assert [d.original_seq for d in undecodable] == garbage  # one each, whichever consumer saw it first
    for d in undecodable:
        assert d.headers["Nats-Msg-Id"] == f"dlq-{ev.RUNS_STREAM}-{d.original_seq}"
        assert d.headers["Yantra-Stream"] == ev.RUNS_STREAM and d.service in ("svc-a", "svc-b")
        assert d.reason.startswith("undecodable: ") and d.original_subject.startswith(f"yantra.run.{run_id}.")
        assert d.headers["Yantra-Time"].endswith("+00:00")
    assert "does not match event type SkillCredited" in undecodable[-1].reason
    failed = sorted((d for d in letters if d.original_seq == failing), key=lambda d: d.service)
    assert [d.service for d in failed] == ["svc-a", "svc-b"]  # a handler failure is per service
    assert [d.headers["Nats-Msg-Id"] for d in failed] == [f"dlq-{ev.RUNS_STREAM}-{failing}-svc-{s}" for s in "ab"]
    assert failed[0].reason.startswith("failed 2 times: RuntimeError('this handler always fails')")
    assert seen == ["RunRequested"] * 4  # each service tried it twice; no garbage reached a handler
    one = await bus.get_dead_letter(failed[0].seq)
    first = failed[0]
    assert (one.seq, one.subject, one.headers, one.data) == (first.seq, "yantra.dlq.svc-a", first.headers, first.data)
    assert abs((one.time - first.time).total_seconds()) < 0.001
    assert await bus.get_dead_letter(10_000) is None


async def test_read_all_and_tail_can_show_undecodable_messages_in_their_place(bus, run_id):
    req = await bus.publish(_request(run_id))
    junk = (await bus.js.publish(ev.run_subject(run_id, "ProfileCaptured"), b"\x00junk")).seq
    wrong = ev.make_envelope(run_id, pb.SkillCredited(skill_id="s"), producer="t", time_ns=1)
    misfiled = (await bus.js.publish(ev.run_subject(run_id, "RunCompleted"), ev.encode(wrong))).seq
    subject = ev.run_filter(run_id)

    events = await bus.read_all(subject)  # only the events: a misfiled one is no event of its subject
    assert [(r.seq, r.type) for r in events] == [(req, "RunRequested")]
    entries = await bus.read_all(subject, include_bad=True)
    assert [type(e).__name__ for e in entries] == ["Recorded", "Undecodable", "Undecodable"]
    assert entries[1] == Undecodable(junk, ev.run_subject(run_id, "ProfileCaptured"), entries[1].reason)
    assert entries[1].reason.startswith("not an Envelope")
    assert entries[2].seq == misfiled and "does not match event type SkillCredited" in entries[2].reason

    tailed = []
    async with contextlib.aclosing(bus.tail(subject, poll_s=0.1, include_bad=True)) as events:
        async for entry in events:
            tailed.append(entry)
            if len(tailed) == 3:
                break
    assert tailed == entries


async def _stream_config(bus, name: str) -> api.StreamConfig:
    return (await bus.js.stream_info(name)).config


@contextlib.contextmanager
def _nats_with_store(tmp_path: Path, max_file_store: str):
    """A nats-server whose JetStream may reserve `max_file_store` on disk (else 75% of the free disk,
    which would make what fits depend on the machine); yields its URL."""
    port = free_port()
    conf = tmp_path / "nats.conf"
    conf.write_text(f'jetstream {{ store_dir: "{tmp_path / "store"}", max_file_store: {max_file_store} }}\n')
    cmd = [find_nats_server(), "-c", str(conf), "-p", str(port), "-a", "127.0.0.1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and proc.poll() is None:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield f"nats://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait()


async def test_every_stream_has_limits_and_existing_streams_get_them_keeping_their_events(tmp_path, run_id):
    with _nats_with_store(tmp_path, "64GB") as url:
        await _old_streams_get_limits(url, run_id)


async def _old_streams_get_limits(url: str, run_id: str) -> None:
    import nats

    nc = await nats.connect(url)  # streams as an older version made them: no limits at all
    js = nc.jetstream()
    await js.add_stream(api.StreamConfig(name=ev.RUNS_STREAM, subjects=[ev.RUN_SUBJECTS], duplicate_window=600))
    await js.add_stream(api.StreamConfig(name=ev.DLQ_STREAM, subjects=[ev.DLQ_SUBJECTS]))
    await nc.close()
    bus = await Bus.connect(url)
    try:
        runs = await _stream_config(bus, ev.RUNS_STREAM)
        assert runs.max_msg_size == RUNS_MAX_MSG_SIZE and runs.max_bytes == RUNS_MAX_BYTES
        assert runs.discard == api.DiscardPolicy.NEW and runs.max_age == 0 and runs.max_msgs == -1  # nothing ages
        dlq = await _stream_config(bus, ev.DLQ_STREAM)
        assert (dlq.max_msgs, dlq.max_bytes, dlq.discard) == (DLQ_MAX_MSGS, DLQ_MAX_BYTES, api.DiscardPolicy.OLD)
        assert dlq.max_age == DLQ_MAX_AGE_S and dlq.duplicate_window == DLQ_DEDUP_WINDOW_S
        metrics = await _stream_config(bus, ev.METRICS_STREAM)
        assert metrics.max_msgs == METRICS_MAX_MSGS and metrics.max_age == METRICS_MAX_AGE_S

        await bus.publish(_request(run_id))
        # A full log refuses new events, loudly, and keeps every old one.
        await bus.js.update_stream(runs.evolve(max_bytes=(await bus.js.stream_info(ev.RUNS_STREAM)).state.bytes))
        late = ev.make_envelope(run_id, pb.SkillCredited(skill_id="late"), producer="t", time_ns=2)
        with pytest.raises(EventRefused, match="YANTRA_RUNS refused SkillCredited"):
            await bus.publish(late)
        assert [r.type for r in await bus.read_run(run_id)] == ["RunRequested"]
    finally:
        await bus.close()
    again = await Bus.connect(url)  # the next start puts the limit back
    try:
        assert (await _stream_config(again, ev.RUNS_STREAM)).max_bytes == RUNS_MAX_BYTES
    finally:
        await again.close()


async def test_a_server_with_little_disk_gets_the_largest_limits_that_fit(tmp_path):
    with _nats_with_store(tmp_path, "2GB") as url:
        for _start in range(2):  # made, then brought up to date by the next start: the same outcome
            bus = await Bus.connect(url)
            try:
                assert (await _stream_config(bus, ev.DLQ_STREAM)).max_bytes == DLQ_MAX_BYTES
                assert (await _stream_config(bus, ev.RUNS_STREAM)).max_bytes == 1 << 30  # 16 GiB halved until it fit
                assert (await _stream_config(bus, ev.METRICS_STREAM)).max_msgs == METRICS_MAX_MSGS
            finally:
                await bus.close()


async def test_a_server_out_of_storage_refuses_an_event_in_one_clear_line(tmp_path, run_id):
    """JetStream out of room on the server's disk (here its max_file_store, 8 MB, all the streams may take):
    `Bus.publish` says so in one line, as for a full log; what the log holds stays."""
    with _nats_with_store(tmp_path, "8MB") as url:
        bus = await Bus.connect(url)
        try:
            published = 0
            with pytest.raises(EventRefused) as err:
                for k in range(100):  # 200 KB each: the 8 MB are used up well before
                    msg = pb.SkillCredited(skill_id=f"{k}" + "x" * 200_000)
                    await bus.publish(
                        ev.make_envelope(run_id, msg, producer="t", time_ns=k, causation_id="c", ordinal=k)
                    )
                    published += 1
            assert 0 < published < 100
            text = str(err.value)
            assert text.startswith(
                f"YANTRA_RUNS refused SkillCredited of run {run_id}: the NATS server is out of storage ("
            )
            assert "free disk where it keeps JetStream, or raise its max_file_store" in text and "\n" not in text
            assert len(await bus.read_run(run_id)) == published and bus.nc.is_connected
        finally:
            await bus.close()


async def test_an_unreachable_server_is_named_with_a_reason():
    url = f"nats://127.0.0.1:{free_port()}"
    with pytest.raises(BusUnavailable) as err:
        await Bus.connect(url, timeout=1.0)
    assert str(err.value) == f"cannot reach NATS at {url}: connection refused"


# ---------------------------------------------------------------------- following across a restarted server


def _credit(run_id: str, k: int) -> ev.Envelope:
    msg = pb.SkillCredited(skill_id=f"s{k}")
    return ev.make_envelope(run_id, msg, producer="t", time_ns=k, causation_id="c", ordinal=k)


async def test_tail_yields_each_event_once_across_a_killed_and_restarted_server(tmp_path, run_id):
    port, store = free_port(), tmp_path / "nats"
    server = start_nats(store, port=port)
    publisher = await Bus.connect(server.url)
    follower = await Bus.connect(server.url, name="follower")
    envs = [
        ev.make_envelope(
            run_id, pb.SkillCredited(skill_id=f"s{k}"), producer="t", time_ns=k, causation_id="c", ordinal=k
        )
        for k in range(60)
    ]
    got: list[ev.Recorded] = []

    async def follow():
        async with contextlib.aclosing(follower.tail(ev.run_filter(run_id), poll_s=0.2)) as events:
            async for rec in events:
                got.append(rec)

    task = asyncio.create_task(follow())
    try:
        for env in envs[:50]:
            await publisher.publish(env)
        deadline = time.monotonic() + 20
        while len(got) < 50 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert len(got) == 50
        server.process.kill()  # at once: the server has no time to write down where its consumers stood
        server.process.wait()
        await publisher.close()
        server = start_nats(store, port=port)
        publisher = await Bus.connect(server.url)
        for env in envs[50:]:
            await publisher.publish(env)
        deadline = time.monotonic() + 30
        while len(got) < 60 and time.monotonic() < deadline and not task.done():
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)  # anything handed out twice would arrive meanwhile
        assert not task.done(), task.exception()  # the restart did not end the tail
        assert [r.env.event_id for r in got] == [e.event_id for e in envs]  # each once, in order
        assert [r.seq for r in got] == list(range(1, 61))
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await publisher.close()
        await follower.close()
        server.stop()


async def test_a_service_whose_work_is_stuck_in_a_thread_still_stops_and_hands_its_message_back(
    own_bus, own_nats, run_id
):
    """A thread cannot be cancelled: the handler's task is, its message handed back at once, and the process, held
    at shutdown by the thread, exits after its grace (status 1, saying why) instead of minutes later."""
    durable = f"hang-{run_id}"
    proc = _start_hanging(
        own_nats.url, durable, ack_wait_s="30", HANG_IN_THREAD="1", YANTRA_SHUTDOWN_GRACE_S="3"
    )  # fmt: skip
    try:
        await own_bus.publish(_request(run_id))
        await asyncio.to_thread(_wait_handling, proc)
        stopped = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 30) == 1
        assert 3 <= time.monotonic() - stopped < 20
        assert "did not stop within 3 s of being told to" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    took = await _seconds_until_redelivered(own_bus, durable, run_id, 30.0, limit=8)
    assert took < 3, took
