"""The profiler service: profile the live model when a run starts, measure it again when the run ends."""

from __future__ import annotations

import logging

from google.protobuf.message import Message

from services.core.events import Recorded
from services.core.pb import events_pb2 as pb
from services.profiler import domain
from services.profiler.adapters import AdminClient

log = logging.getLogger(__name__)


class ProfilerService:
    name = "profiler"
    consumes = ("RunRequested", "ProfileCaptured", "TargetConcluded", "SwapCommitted", "SwapRejected", "SwapRolledBack")

    def __init__(self, admin: AdminClient, repeats: int = domain.MEASURE_REPEATS):
        self.admin = admin
        self.repeats = repeats

    async def handle(self, trigger: Recorded, prior: list[Recorded]) -> list[Message]:
        prompts, tokens = domain.measurement_plan(prior)
        if trigger.type == "RunRequested":
            observed = await self.admin.capture_profile(prompts, tokens, self.repeats)
            return [domain.derive_profile_captured(prior, trigger, observed)]
        if not domain.completes_run(prior, trigger):
            return []
        # Measured again whatever the outcome, on the same prompts as 'before': an honest after.
        reply = await self.admin.measure_decode(prompts, tokens, self.repeats)
        observed = pb.RunObservation(
            decode_tokens_per_s_after=reply.tokens_per_s, tokens_generated=reply.tokens_generated
        )
        return [domain.derive_run_completed(prior, trigger, observed)]
