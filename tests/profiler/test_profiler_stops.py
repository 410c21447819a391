"""A run stopped while the server works on it stops that work; a call past its deadline ends the run, once.

Real nats-server, the profiler consuming through a durable consumer as in production, and the real server: an
Engine on tiny-qwen2 behind the real grpc.aio Admin API. Before, `yantra cancel` left the model held to the end of
a profile nobody would read, a deadline was retried delivery after delivery, and the server kept working for a
caller that had gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
from runlog import has, publish, wait_for_log

from services.core import events as ev
from services.core import run_end
from services.core.bus import Bus
from services.core.pb import events_pb2 as pb
from services.core.replay import verify
from services.core.runner import answer
from services.profiler import domain
from services.profiler.adapters import TIMEOUT_ENV, AdminClient
from services.profiler.service import ProfilerService
from services.server.engine import Engine
from services.server.grpc_api import start_grpc
from services.server.models import load_model

# 4 prompts x 256 tokens (a run's most: 1,024 tokens a pass), 5 repeats: a capture of ~7,000 decode steps, 15 s or
# more of the tiny model on a CPU; each test stops it within its first seconds.
LONG_RUN = pb.RunRequested(
    prompts=["Hello there", "Once upon a time", "def f(x):", "The sky is"], decode_tokens=256, max_candidates=1
)


@pytest.fixture(scope="module")
def engine():
    e = Engine(load_model("tiny-qwen2", "cpu"))
    yield e
    e.close()


@pytest.fixture
async def server_addr(engine):
    server, port = await start_grpc(engine, "127.0.0.1:0")
    yield f"127.0.0.1:{port}"
    await server.stop(0)


@contextlib.asynccontextmanager
async def profiler(nats_url: str, addr: str, durable: str, run_id: str, timeout_s: float = 600.0):
    """The profiler answering `run_id` through the durable consumer `durable`, on its own connection, watching runs
    for a stop on it as `python -m services.profiler` does; stopped (its message handed back) on leaving."""
    service_bus = await Bus.connect(nats_url, name=durable)
    admin = AdminClient(addr, timeout_s=timeout_s)
    service = ProfilerService(admin, bus=service_bus)
    stop = asyncio.Event()
    subjects = [ev.run_filter(run_id, t) for t in service.consumes]

    async def on_message(rec: ev.Recorded) -> None:
        await answer(service_bus, service, rec)

    task = asyncio.create_task(service_bus.consume(durable, subjects, on_message, stop, ack_wait=10))
    try:
        yield service_bus
    finally:
        stop.set()
        await task
        await admin.close()
        await service_bus.nc.close()  # close, not drain (see test_profiler_service.py's fixture)


async def _until(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.02)
    return predicate()


async def _settled(bus: Bus, durable: str, timeout: float = 20.0):
    """The consumer's info once every message it was handed is acknowledged (its handler has returned). Only the
    RunRequested is delivered to it (a stopping event is no trigger of the profiler's), so its consumer sequence
    counts that message's deliveries."""
    deadline = time.monotonic() + timeout
    while True:
        info = await bus.js.consumer_info(ev.RUNS_STREAM, durable)
        if (info.num_ack_pending == 0 and info.num_pending == 0) or time.monotonic() > deadline:
            return info
        await asyncio.sleep(0.1)


async def _served(engine: Engine) -> list[int]:
    """A request served on the live model (a Generate's path): it gets the model only once nothing else holds it."""
    return [t for chunk in [c async for c in engine.generate(engine.encode("Hi"), 4, stop_at_eos=False)] for t in chunk]


@pytest.mark.parametrize("stop_type", ["RunCancelled", "RunFailed"])
async def test_a_run_stopped_mid_capture_frees_the_server_and_nothing_answers_it(
    bus, nats_server, server_addr, engine, run_id, stop_type
):
    durable = f"profiler-{run_id}"
    cancelled = engine.works_cancelled
    async with profiler(nats_server.url, server_addr, durable, run_id):
        request = await publish(bus, run_id, LONG_RUN, "client")
        assert await _until(lambda: engine.working == "_capture_profile", 30), "the capture never started"
        if stop_type == "RunCancelled":  # `yantra cancel RUN`
            await publish(bus, run_id, pb.RunCancelled(reason="test: wrong model", requested_by="test"), "cli", request)
        else:  # another service ended the run
            failed = pb.RunFailed(reason="judge could not answer: test", failed_trigger="CandidateProposed")
            await publish(bus, run_id, failed, "judge", request)
        # The profiler sees the stop (it tails the run), cancels its call, and the server stops the capture.
        assert await _until(lambda: engine.works_cancelled == cancelled + 1 and engine.working == "", 5), (
            engine.works_cancelled,
            engine.working,
        )
        assert len(await asyncio.wait_for(_served(engine), 10)) == 4  # the model serves again
        info = await _settled(bus, durable)  # the handler returned: its message acknowledged, not redelivered
        assert info.num_ack_pending == 0 and info.delivered.consumer_seq == 1
    log = await bus.read_run(run_id)
    assert [r.type for r in log] == ["RunRequested", stop_type]  # no ProfileCaptured, nor anything else


async def test_a_capture_past_its_deadline_ends_the_run_once_and_the_server_stops_it(
    bus, nats_server, server_addr, engine, run_id
):
    durable = f"profiler-{run_id}"
    cancelled = engine.works_cancelled
    async with profiler(nats_server.url, server_addr, durable, run_id, timeout_s=1.0):
        await publish(bus, run_id, LONG_RUN, "client")
        log = await wait_for_log(bus, run_id, has("RunFailed"), 30)
        assert await _until(lambda: engine.works_cancelled == cancelled + 1 and engine.working == "", 5)
        info = await _settled(bus, durable)
        assert info.delivered.consumer_seq == 1  # handled once: a deadline is not retried by redelivery
    assert [r.type for r in await bus.read_run(run_id)] == ["RunRequested", "RunFailed"]
    failed = ev.last(log, "RunFailed")
    assert failed.env.producer == "profiler" and failed.msg.failed_trigger == "RunRequested"
    assert failed.msg.reason.startswith("profiler could not answer RunRequested (gave up after 1 attempts): ")
    assert f"CaptureProfile on the inference server at {server_addr} ran past the profiler's deadline of 1 s " in (
        failed.msg.reason
    )
    assert f"({TIMEOUT_ENV})" in failed.msg.reason
    assert verify(log, {**domain.REDERIVE, **run_end.REDERIVE}) == []


async def test_a_request_handed_back_then_cancelled_is_not_answered_after_a_restart(
    bus, nats_server, server_addr, engine, run_id
):
    """The profiler stops mid-capture (its message handed back for redelivery), the run is cancelled, the profiler
    starts again on the same durable consumer: the request comes back and is acknowledged unanswered (the runner
    answers nothing of a stopped run), and the server is never asked again."""
    durable = f"profiler-{run_id}"
    cancelled = engine.works_cancelled
    async with profiler(nats_server.url, server_addr, durable, run_id):
        request = await publish(bus, run_id, LONG_RUN, "client")
        assert await _until(lambda: engine.working == "_capture_profile", 30)
    # Stopping the profiler cancelled its handler, hence its call, hence the server's capture.
    assert await _until(lambda: engine.works_cancelled == cancelled + 1 and engine.working == "", 5)
    await publish(bus, run_id, pb.RunCancelled(reason="test", requested_by="test"), "cli", request)

    seen: set[str] = set()

    async def watch_engine() -> None:
        while True:
            seen.add(engine.working)
            await asyncio.sleep(0.01)

    watcher = asyncio.create_task(watch_engine())
    try:
        async with profiler(nats_server.url, server_addr, durable, run_id):
            info = await _settled(bus, durable)
            await asyncio.sleep(1.0)  # anything the redelivery would start has had time to
    finally:
        watcher.cancel()
    # delivered twice (the consumer's sequence counts deliveries), the second acknowledged
    assert info.delivered.consumer_seq == 2 and info.ack_floor.consumer_seq == 2 and info.num_pending == 0, info
    assert "_capture_profile" not in seen and engine.works_cancelled == cancelled + 1
    assert [r.type for r in await bus.read_run(run_id)] == ["RunRequested", "RunCancelled"]
