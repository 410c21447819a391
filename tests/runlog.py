"""Run logs for tests: an in-memory one for the services' pure domains, and helpers for a real bus."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from services.core import events as ev


class RunLog:
    """An in-memory run log; events answering a cause get ids derived from it, as the runner makes them
    (the ordinal is the event's place among its producer's answers to that cause)."""

    def __init__(self, run_id: str = "run1"):
        self.run_id = run_id
        self.log: list[ev.Recorded] = []

    def add(self, msg, producer: str, cause: ev.Recorded | None = None) -> ev.Recorded:
        if cause is None:
            env = ev.make_envelope(self.run_id, msg, producer=producer, time_ns=0, event_id=f"req-{len(self.log)}")
        else:
            ordinal = sum(r.env.causation_id == cause.env.event_id and r.env.producer == producer for r in self.log)
            env = ev.make_envelope(
                self.run_id, msg, producer=producer, time_ns=0, causation_id=cause.env.event_id, ordinal=ordinal
            )
        rec = ev.Recorded(len(self.log) + 1, env)
        self.log.append(rec)
        return rec


# ---------------------------------------------------------------------- on a real bus


def has(type_name: str) -> Callable[[list[ev.Recorded]], bool]:
    """A predicate for `wait_for_log`: the log holds a `type_name` event."""
    return lambda log: any(r.type == type_name for r in log)


async def wait_for_log(
    bus, run_id: str, predicate: Callable, timeout: float = 30.0, *, check: Callable[[], None] | None = None
) -> list[ev.Recorded]:
    """The run's log once `predicate(log)` holds; `check()`, run between reads, may fail the wait early."""
    deadline = time.monotonic() + timeout
    log: list[ev.Recorded] = []
    while time.monotonic() < deadline:
        log = await bus.read_run(run_id)
        if predicate(log):
            return log
        if check is not None:
            check()
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s; run {run_id} holds {[r.type for r in log]}")


async def wait_for_events(bus, run_id: str, type_name: str, count: int = 1, timeout: float = 30.0) -> list[ev.Recorded]:
    """Every `type_name` event of the run, once there are at least `count` of them."""
    log = await wait_for_log(bus, run_id, lambda log: len(ev.all_of(log, type_name)) >= count, timeout)
    return ev.all_of(log, type_name)


async def publish(bus, run_id: str, msg, producer: str, cause: ev.Recorded | None = None) -> ev.Recorded:
    """Publish `msg` as the run's request (no cause) or as the answer to `cause`; returns it as recorded."""
    if cause is None:
        env = ev.make_envelope(run_id, msg, producer=producer, time_ns=time.time_ns(), event_id=f"req-{run_id}")
    else:
        env = ev.make_envelope(run_id, msg, producer=producer, time_ns=time.time_ns(), causation_id=cause.env.event_id)
    return ev.Recorded(await bus.publish(env), env)


async def publish_envelope(
    bus, run_id: str, msg, cause: ev.Envelope | None = None, producer: str = "test"
) -> ev.Envelope:
    """Publish `msg` caused by the envelope `cause` (or by nothing); returns the envelope."""
    causation = cause.event_id if cause else ""
    env = ev.make_envelope(run_id, msg, producer=producer, time_ns=time.time_ns(), causation_id=causation)
    await bus.publish(env)
    return env
