"""The skill store service: answer targets with a skill, turn judged recipes into skills, keep the index current."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence

from google.protobuf.message import Message

from services.core import events as ev
from services.core import run_state
from services.core.bus import Bus
from services.core.events import Recorded
from services.core.pb import events_pb2 as pb
from services.skillstore import domain
from services.skillstore.library import INDEX_EVENTS, SkillIndex

log = logging.getLogger(__name__)

# An index write that fails (a full disk) is retried in place: a nak would let later events through
# first, and the index ignores anything at or below the last sequence it applied.
APPLY_ATTEMPTS = 5


class SkillstoreService:
    name = "skillstore"
    consumes = (
        "ProfileCaptured",
        "CandidateJudged",
        "SwapCommitted",
        "SwapRolledBack",
        "TargetConcluded",
        "SwapRejected",
    )

    def __init__(self, index: SkillIndex, k: int = domain.NEIGHBOURS_K):
        self.index = index
        self.k = k

    async def handle(self, trigger: Recorded, prior: list[Recorded]) -> list[Message]:
        out = domain.decide(prior, trigger)
        # A target's search starts here: the profile's first, or the next once the one before has ended.
        target = domain.target_starting(prior, trigger)
        if not target:
            return out  # nothing (more) to optimise: the profiler ends the run
        profile = run_state.fold(prior).profile
        try:
            fingerprint = domain.target_fingerprint(
                trigger.msg if trigger.type == "ProfileCaptured" else profile, target
            )
        except domain.BadTrigger as exc:
            log.error("run %s: %s; not answering it", trigger.env.run_id, exc)
            return out
        try:
            neighbours = await asyncio.to_thread(self.index.neighbours, list(fingerprint.vector), self.k)
        except domain.WrongDimension as exc:
            # A profiler whose fingerprints another library's cannot compare with: no neighbour, a cold start (as
            # when none is near), said here since the event only says none was comparable.
            log.error("run %s: %s; %s starts cold", trigger.env.run_id, exc, target)
            neighbours = []
        # What was retrieved, with its distances, pulls and rewards, and the library's size, is recorded in the
        # event (SkillsRetrieved.observed): replay re-derives the pick from it and never asks the index.
        observed = pb.SkillsObservation(neighbours=neighbours, library_size=await asyncio.to_thread(self.index.size))
        return [*out, domain.derive_skills_retrieved(prior, trigger, observed)]


async def _apply(index: SkillIndex, rec: Recorded) -> None:
    for attempt in range(1, APPLY_ATTEMPTS + 1):
        try:
            await asyncio.to_thread(index.apply, rec)
            return
        except OSError as exc:
            if attempt == APPLY_ATTEMPTS:
                raise
            log.warning("skill index: applying seq %d failed (%s); retrying", rec.seq, exc)
            await asyncio.sleep(0.2 * 2**attempt)


async def run_index_projector(
    bus: Bus,
    index: SkillIndex,
    stop: asyncio.Event,
    *,
    runs: Sequence[str] = ("*",),
) -> None:
    """Keep `index` a projection of every SkillPublished / SkillCredited, in stream order.

    Reads with its own ephemeral consumer from the sequence after the last one the index applied,
    never a shared durable: every replica of the skill store folds every event into its own index
    (a durable shared by replicas would hand each only part of them), and a lost library rebuilds
    from the start of the stream. `runs` narrows it to some runs (tests share one nats-server).
    """
    subjects = [ev.run_filter(run, t) for run in runs for t in INDEX_EVENTS]
    log.info("skill index at seq %d, %d skills; following from there", index.last_seq(), index.size())

    async def follow() -> None:
        async with contextlib.aclosing(bus.tail(subjects, start_seq=index.last_seq() + 1)) as events:
            async for rec in events:
                await _apply(index, rec)

    follower = asyncio.create_task(follow())
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait([follower, stopping], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (follower, stopping):
            task.cancel()
        await asyncio.gather(follower, stopping, return_exceptions=True)
    if follower.done() and not follower.cancelled() and follower.exception():
        raise follower.exception()  # an index that cannot be written: the service exits and restarts
