"""The skill store service: answer targets with a skill, turn judged recipes into skills, keep the index current."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from google.protobuf.message import Message

from services.core import events as ev
from services.core.bus import Bus
from services.core.events import Recorded
from services.core.pb import events_pb2 as pb
from services.skillstore import domain
from services.skillstore.library import INDEX_EVENTS, SkillIndex

log = logging.getLogger(__name__)

INDEX_DURABLE = "skillstore-index"
# An index write that fails (a full disk) is retried in place: a nak would let later events through
# first, and the index ignores anything at or below the last sequence it applied.
APPLY_ATTEMPTS = 5


class SkillstoreService:
    name = "skillstore"
    consumes = ("ProfileCaptured", "CandidateJudged", "SwapCommitted", "SwapRolledBack")

    def __init__(self, index: SkillIndex, k: int = domain.NEIGHBOURS_K):
        self.index = index
        self.k = k

    async def handle(self, trigger: Recorded, prior: list[Recorded]) -> list[Message]:
        if trigger.type != "ProfileCaptured":
            return domain.decide(prior, trigger)
        profile: pb.ProfileCaptured = trigger.msg
        if not profile.target_class:
            return []  # nothing to optimise: the profiler ends the run
        try:
            fingerprint = domain.target_fingerprint(profile)
        except domain.BadTrigger as exc:
            log.error("run %s: %s; not answering it", trigger.env.run_id, exc)
            return []
        neighbours = await asyncio.to_thread(self.index.neighbours, list(fingerprint.vector), self.k)
        observed = pb.SkillsObservation(neighbours=neighbours, library_size=self.index.size())
        return [domain.derive_skills_retrieved(prior, trigger, observed)]


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


async def catch_up(bus: Bus, index: SkillIndex, runs: Sequence[str] = ("*",)) -> int:
    """Apply every index event in the stream past the index's position (a lost or new library rebuilds)."""
    found: list[Recorded] = []
    for run in runs:
        for type_name in INDEX_EVENTS:
            found += await bus.read_all(ev.run_filter(run, type_name))
    applied = 0
    for rec in sorted(found, key=lambda r: r.seq):
        if rec.seq > index.last_seq():
            await _apply(index, rec)
            applied += 1
    return applied


async def run_index_projector(
    bus: Bus,
    index: SkillIndex,
    stop: asyncio.Event,
    *,
    durable: str = INDEX_DURABLE,
    runs: Sequence[str] = ("*",),
    ack_wait: float = 30.0,
) -> None:
    """Keep `index` a projection of every SkillPublished / SkillCredited, in stream order.

    `runs` narrows it to some runs (tests share one nats-server); a deployment folds every run.
    """
    caught = await catch_up(bus, index, runs)
    log.info("skill index at seq %d (%d events caught up), %d skills", index.last_seq(), caught, index.size())

    async def on_message(rec: Recorded) -> None:
        await _apply(index, rec)

    subjects = [ev.run_filter(run, t) for run in runs for t in INDEX_EVENTS]
    await bus.consume(durable, subjects, on_message, stop, ack_wait=ack_wait)
