"""A call the client gave up on stops the engine's work too, and the model serves Generate again at once.

The engine's work runs on a thread, which cannot be cancelled: before, a MeasureDecode past its caller's deadline
went on to its end (minutes here) and every Generate queued behind it. Real engine (tiny-qwen2 on the CPU), real
grpc.aio server over loopback.
"""

from __future__ import annotations

import asyncio
import threading
import time

import grpc
import pytest

from services.core.pb import inference_pb2 as ipb
from services.core.pb import inference_pb2_grpc as ipb_grpc
from services.server.grpc_api import start_grpc

# 4 prompts x 200 tokens x 100 repeats: ~80,000 decode steps, minutes of the tiny model on a CPU (~2 ms a step).
LONG_MEASURE = ipb.MeasureDecodeRequest(
    prompts=["Hello there", "Once upon a time", "def f(x):", "The sky is"], max_new_tokens=200, repeats=100
)


@pytest.fixture
async def channel(engine):
    server, port = await start_grpc(engine, "127.0.0.1:0")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        yield ch
    await server.stop(0)


async def _until(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.02)
    return predicate()


async def _generate(channel, timeout: float) -> list[ipb.GenerateChunk]:
    stub = ipb_grpc.InferenceStub(channel)
    request = ipb.GenerateRequest(prompt="Hi", max_new_tokens=4, ignore_eos=True)
    return [c async for c in stub.Generate(request, timeout=timeout)]


async def test_a_measure_past_its_deadline_stops_on_the_server_and_generate_is_served_at_once(engine, channel):
    admin = ipb_grpc.AdminStub(channel)
    cancelled = engine.works_cancelled
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await admin.MeasureDecode(LONG_MEASURE, timeout=1.5)
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    # The measure stopped part-way (it did not run to its end) and the engine thread is free.
    assert await _until(lambda: engine.works_cancelled == cancelled + 1 and engine.working == ""), (
        engine.works_cancelled,
        engine.working,
    )
    # A Generate right after gets the model: it would otherwise wait minutes behind the measure.
    chunks = await _generate(channel, timeout=20)
    assert (
        sum(len(c.token_ids) for c in chunks) == 4
        and [c.done for c in chunks][-1]
        and not any(c.done for c in chunks[:-1])
    )
    assert engine.works_cancelled == cancelled + 1  # (the batch loop may still be on its last tick: "ticks")


async def test_a_profile_the_client_cancels_stops_on_the_server(engine, channel):
    admin = ipb_grpc.AdminStub(channel)
    cancelled, kept = engine.works_cancelled, engine.live_inputs
    request = ipb.CaptureProfileRequest(prompts=list(LONG_MEASURE.prompts), max_new_tokens=200, repeats=100)
    call = admin.CaptureProfile(request)
    assert await _until(lambda: engine.working == "_capture_profile")
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert await _until(lambda: engine.works_cancelled == cancelled + 1 and engine.working == "")
    assert engine.live_inputs is kept  # a profile stopped part-way leaves what the last one recorded
    assert [c.done for c in await _generate(channel, timeout=20)][-1]


async def test_a_cancelled_caller_keeps_the_model_until_its_work_has_stopped(engine):
    """The lock is held until the engine thread has left the work (which stops at its next check), never handed on
    while the thread still runs the model."""
    started, checks = threading.Event(), []

    def work() -> None:
        started.set()
        while True:  # stands for a decode loop: one check a step
            checks.append(time.monotonic())
            engine.check_cancelled()
            time.sleep(0.01)

    cancelled = engine.works_cancelled
    task = asyncio.ensure_future(engine.exclusive(work))
    assert await _until(started.is_set)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # By the time the caller sees its cancellation, the work has stopped: the model is free, nothing runs on it.
    assert engine.working == "" and not engine._lock.locked() and engine.works_cancelled == cancelled + 1
    stopped_at = len(checks)
    await asyncio.sleep(0.1)
    assert len(checks) == stopped_at
    assert (await engine.exclusive(engine.decode, [72, 105], 2))[0]  # the next caller gets it at once


async def test_work_outside_a_cancelled_call_is_not_stopped(engine):
    """Only the cancelled caller's work stops: the next call's flag is its own."""
    assert engine.check_cancelled() is None  # outside `exclusive` (loading, a bench): no caller to give up
    tokens, _ = await engine.exclusive(engine.decode, [72, 105], 8)
    assert len(tokens) == 8
