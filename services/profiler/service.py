"""The profiler service: profile the live model when a run starts, measure it again when the run ends."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable
from typing import TypeVar

from google.protobuf.message import Message

from services.core import events as ev
from services.core import run_end
from services.core.bus import Bus
from services.core.events import Recorded
from services.core.pb import events_pb2 as pb
from services.profiler import catalogue, domain, served_plan, served_verdict
from services.profiler.adapters import AdminCallFailed, AdminClient
from services.profiler.served_load import ServedLoadClient

log = logging.getLogger(__name__)

T = TypeVar("T")
# How long a cancelled stop watch may take to end before the run's answer goes without it.
WATCH_CANCEL_S = 10.0


class ProfilerService:
    name = "profiler"
    consumes = (
        "RunRequested",
        "ProfileCaptured",
        "TargetConcluded",
        "SwapCommitted",
        "SwapRejected",
        "SwapRolledBack",
        "RunCompleted",
    )

    def __init__(
        self,
        admin: AdminClient,
        repeats: int = domain.MEASURE_REPEATS,
        bus: Bus | None = None,
        served: ServedLoadClient | None = None,
    ):
        """`bus`: where to watch a run for a stop (RunCancelled, RunFailed) while the server works on it; without
        one, a call runs to its end or its deadline. `served`: the client that measures the served load before and
        after a run (schema 11); without one, a run's before/after is the batch-1 decode of MeasureDecode."""
        self.admin = admin
        self.repeats = repeats
        self.bus = bus
        self.served = served

    async def handle(self, trigger: Recorded, prior: list[Recorded]) -> list[Message]:
        try:
            return await self._handle(trigger, prior)
        except AdminCallFailed as exc:
            if not exc.ends_run:
                raise  # redelivered; after the last attempt the runner ends the run (RunFailed)
            # The server refused the run's own request (a prompt too long for the model, say), or the call ran past
            # its deadline: no retry can do better, so the run ends now, saying why. A deadline is a try given up
            # (attempts 1), a refusal none.
            observed = pb.RunFailureObservation(service=self.name, error=str(exc), attempts=int(exc.timed_out))
            return [run_end.run_failed(prior, trigger, observed)]

    async def _handle(self, trigger: Recorded, prior: list[Recorded]) -> list[Message]:
        prompts, tokens = domain.measurement_plan(prior)
        if trigger.type == "RunCompleted":  # the run's verdict: its swaps rolled back for a served regression
            return list(served_verdict.rollback_requests(trigger.msg))
        if trigger.type == "RunRequested":
            problem = domain.request_problem(trigger.msg)
            if problem:
                return [run_end.run_failed(prior, trigger, pb.RunFailureObservation(service=self.name, error=problem))]
            # The profile first: the server refuses a run's own prompts there (too long for the model) at once, so a
            # run that cannot finish ends before a served measure of minutes; its hooks are gone when it returns.
            observed = await self._unless_stopped(trigger, self.admin.capture_profile(prompts, tokens, self.repeats))
            if observed is None:
                return []
            if self.served is not None:  # before any swap of this run touches the model
                health = await self.admin.health()
                plan = served_plan.plan_for(trigger.msg, health.device)
                before = await self._unless_stopped(trigger, self.served.measure(plan, health.device))
                if before is None:
                    return []
                observed.served_before.CopyFrom(before)
            # what the run's author can write now (the templates', or an LLM's): the ranking's, recorded
            observed.catalogue.extend(catalogue.live(trigger.msg.author))
            return [domain.derive_profile_captured(prior, trigger, observed)]
        if not domain.completes_run(prior, trigger):
            return []
        # Measured again whatever the outcome, by the plan of the 'before': an honest after.
        served_before = served_verdict.before_of(prior)
        if self.served is not None and served_before is not None:
            after = await self._unless_stopped(trigger, self.served.measure(served_before.plan, served_before.device))
            if after is None:
                return []
            observed = pb.RunObservation(served_after=after, device=after.device)
            return [domain.derive_run_completed(prior, trigger, observed)]
        reply = await self._unless_stopped(trigger, self.admin.measure_decode(prompts, tokens, self.repeats))
        if reply is None:
            return []
        observed = pb.RunObservation(
            decode_tokens_per_s_after=reply.tokens_per_s, tokens_generated=reply.tokens_generated, device=reply.device
        )
        return [domain.derive_run_completed(prior, trigger, observed)]

    async def _unless_stopped(self, trigger: Recorded, call: Awaitable[T]) -> T | None:
        """`call`'s answer, or None once the run is stopped (a RunCancelled: `yantra cancel`; a RunFailed of another
        service) before it comes. The call is then cancelled, and the server stops its work with it: the model was
        otherwise held to the end of a profile nobody would read."""
        work = asyncio.ensure_future(call)
        if self.bus is None:
            return await work
        watch = asyncio.ensure_future(self._stopping(trigger.env.run_id))
        try:
            done, _ = await asyncio.wait([work, watch], return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # the service is stopping: the server's work stops with the call
            work.cancel()
            watch.cancel()
            raise
        if watch in done and watch.exception() is None:
            stop = watch.result()
            work.cancel()
            await asyncio.wait([work])  # the call's own end (cancelled, or an answer that came at the same time)
            if not work.cancelled():
                work.exception()  # retrieved: nobody reads it now
            log.info(
                "%s of run %s: the run %s while the server worked on it; call cancelled, nothing answered",
                trigger.type,
                trigger.env.run_id,
                stop.type,
            )
            return None
        if watch in done:  # the watch failed (the bus is closing): the call alone decides
            log.warning("cannot watch run %s for a stop: %r", trigger.env.run_id, watch.exception())
        else:
            watch.cancel()
            # bounded: a watch that ignores its cancel (see Bus.tail) must not hold the run's answer, and with it
            # every event queued behind it, for good
            _, still = await asyncio.wait([watch], timeout=WATCH_CANCEL_S)
            if still:
                log.warning("the stop watch of run %s did not end on cancel; answering without it", trigger.env.run_id)
        return await work

    async def _stopping(self, run_id: str) -> Recorded:
        """The run's first stopping event (RunCancelled, RunFailed), once there is one: one already in the log too."""
        subjects = [ev.run_filter(run_id, t) for t in ev.STOPPING_EVENTS]
        async with contextlib.aclosing(self.bus.tail(subjects)) as events:
            async for rec in events:
                return rec
        raise RuntimeError(f"the tail of run {run_id} ended")  # a tail runs until it is closed
