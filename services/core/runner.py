"""Runs a stateless service: consume trigger events, fold the run's own log, emit answers."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

from google.protobuf.message import Message

from services.core import events as ev
from services.core import run_end
from services.core.bus import ACK_WAIT_S, MAX_DELIVER, Bus
from services.core.events import Recorded
from services.core.pb import events_pb2 as pb

log = logging.getLogger(__name__)


class Service(Protocol):
    name: str
    consumes: tuple[str, ...]

    async def handle(self, trigger: Recorded, prior: list[Recorded]) -> list[Message]:
        """Answer `trigger`. `prior` is the run's log up to and including the trigger."""
        ...


def answers_given(log_: list[Recorded], trigger: Recorded, producer: str) -> tuple[int, bool]:
    """(how many answers `producer` gave `trigger`, whether that is all of them).

    A handler's answers are published one by one (ordinals 0, 1, ...), each saying how many there are: a
    producer that died between two leaves the trigger part-answered, and the rest are still owed. An answer
    recorded before the count was (answers 0) stands for the whole.
    """
    mine = [r for r in log_ if r.env.causation_id == trigger.env.event_id and r.env.producer == producer]
    if not mine:
        return 0, False
    return len(mine), any(r.env.answers == 0 for r in mine) or len(mine) >= max(r.env.answers for r in mine)


def prefix_through(log_: list[Recorded], trigger: Recorded) -> list[Recorded]:
    """What a handler may look at: the log up to the trigger, so replay sees exactly the same."""
    prior = [r for r in log_ if r.seq <= trigger.seq]
    if not any(r.seq == trigger.seq for r in prior):
        prior.append(trigger)
    return prior


async def answer(bus: Bus, service: Service, trigger: Recorded, clock: Callable[[], int] = time.time_ns) -> int:
    """Handle one trigger idempotently; returns how many events were published."""
    run_log = await bus.read_run(trigger.env.run_id)
    given, complete = answers_given(run_log, trigger, service.name)
    if complete:
        log.info("%s: %s %s already answered", service.name, trigger.type, trigger.env.event_id[:8])
        return 0
    if not run_end.answers(run_log, trigger):  # a stopped run takes no more answers, owed or not
        stop = run_end.stopped(run_log)
        log.info("%s: %s of run %s not answered: the run %s", service.name, trigger.type, trigger.env.run_id, stop.type)
        return 0
    # Handling again after a part-answer derives the same answers from the same log prefix (the handlers of
    # fan-out events are pure): the ones already published are skipped, the rest keep their ordinals.
    out = await service.handle(trigger, prefix_through(run_log, trigger))
    for ordinal, msg in enumerate(out):
        if ordinal < given:
            continue
        env = ev.make_envelope(
            trigger.env.run_id,
            msg,
            producer=service.name,
            time_ns=clock(),
            causation_id=trigger.env.event_id,
            ordinal=ordinal,
            answers=len(out),
        )
        await bus.publish(env)
        log.info("%s: %s -> %s (%d of %d)", service.name, trigger.type, env.type, ordinal + 1, len(out))
    return max(0, len(out) - given)


async def run_service(
    bus: Bus, service: Service, stop: asyncio.Event, ack_wait: float = ACK_WAIT_S, max_deliver: int = MAX_DELIVER
) -> None:
    """Answer the service's triggers until `stop`; a trigger it fails `max_deliver` times ends its run (RunFailed)."""
    subjects = [ev.run_filter("*", t) for t in service.consumes]

    async def on_message(rec: Recorded) -> None:
        await answer(bus, service, rec)

    async def on_give_up(rec: Recorded, error: str, attempts: int) -> None:
        await give_up(bus, service.name, rec, error, attempts)

    await bus.consume(
        service.name, subjects, on_message, stop, ack_wait=ack_wait, max_deliver=max_deliver, on_give_up=on_give_up
    )


async def give_up(
    bus: Bus, service_name: str, trigger: Recorded, error: str, attempts: int, clock: Callable[[], int] = time.time_ns
) -> bool:
    """End the run with a RunFailed when `service_name` could not answer `trigger`; False if it had ended already.

    Without it a run whose trigger was dead-lettered would wait forever for an answer that cannot come.
    """
    run_log = await bus.read_run(trigger.env.run_id)
    if run_end.ended(run_log) is not None:
        return False
    observed = pb.RunFailureObservation(service=service_name, error=error[:2000], attempts=attempts)
    msg = run_end.run_failed(prefix_through(run_log, trigger), trigger, observed)
    env = ev.make_envelope(
        trigger.env.run_id, msg, producer=service_name, time_ns=clock(), causation_id=trigger.env.event_id
    )
    await bus.publish(env)
    log.error("%s: run %s failed: %s", service_name, trigger.env.run_id, msg.reason)
    return True
