"""A tail whose task was cancelled ends, even when the cancel was swallowed on its way (nats-py's fetch waits with
asyncio.wait_for, which on Python 3.11 can return a reply that came at the same moment instead of raising): a tail
that polled on made the profiler, which waits for its stop watch, hang for good under load (bench/load_runs.py)."""

from __future__ import annotations

import asyncio
import contextlib

from services.core import events as ev
from services.core.pb import events_pb2 as pb


async def test_a_tail_ends_when_its_task_was_cancelled_even_if_the_cancel_was_swallowed(bus, run_id):
    msg = pb.RunRequested(model="tiny-qwen2", max_candidates=1, prompts=["hi"], decode_tokens=4)
    await bus.publish(ev.make_envelope(run_id, msg, producer="t", time_ns=1, event_id=f"req-{run_id}"))

    async def follow() -> str:
        async with contextlib.aclosing(bus.tail(ev.run_filter(run_id), poll_s=0.05)) as events:
            async for _ in events:
                me = asyncio.current_task()
                me.cancel()
                try:
                    await asyncio.sleep(0)  # the cancel lands here, and is swallowed as wait_for may swallow it:
                except asyncio.CancelledError:  # not re-raised, its request not withdrawn (no uncancel)
                    pass
                assert me.cancelling() == 1
            return "the tail ended of itself"  # never: a tail only ends by an error or a cancel

    task = asyncio.create_task(follow())
    done, _ = await asyncio.wait([task], timeout=10)
    assert done, "the tail polled on after its task was cancelled"
    assert task.cancelled()  # it ended by the cancel, not by running out of events
