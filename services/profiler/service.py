"""The profiler service: profile the live model when a run starts, measure it again when the run ends."""

from __future__ import annotations

import logging

from google.protobuf.message import Message

from services.core import run_end
from services.core.events import Recorded
from services.core.pb import events_pb2 as pb
from services.profiler import domain
from services.profiler.adapters import AdminCallFailed, AdminClient

log = logging.getLogger(__name__)


class ProfilerService:
    name = "profiler"
    consumes = ("RunRequested", "ProfileCaptured", "TargetConcluded", "SwapCommitted", "SwapRejected", "SwapRolledBack")

    def __init__(self, admin: AdminClient, repeats: int = domain.MEASURE_REPEATS):
        self.admin = admin
        self.repeats = repeats

    async def handle(self, trigger: Recorded, prior: list[Recorded]) -> list[Message]:
        try:
            return await self._handle(trigger, prior)
        except AdminCallFailed as exc:
            if not exc.refused:
                raise  # redelivered; after the last attempt the runner ends the run (RunFailed)
            # The server refused the run's own request (a prompt too long for the model, say): no retry
            # can succeed, so the run ends now, saying why.
            observed = pb.RunFailureObservation(service=self.name, error=str(exc))
            return [run_end.run_failed(prior, trigger, observed)]

    async def _handle(self, trigger: Recorded, prior: list[Recorded]) -> list[Message]:
        prompts, tokens = domain.measurement_plan(prior)
        if trigger.type == "RunRequested":
            problem = domain.request_problem(trigger.msg)
            if problem:
                return [run_end.run_failed(prior, trigger, pb.RunFailureObservation(service=self.name, error=problem))]
            observed = await self.admin.capture_profile(prompts, tokens, self.repeats)
            return [domain.derive_profile_captured(prior, trigger, observed)]
        if not domain.completes_run(prior, trigger):
            return []
        # Measured again whatever the outcome, on the same prompts as 'before': an honest after.
        reply = await self.admin.measure_decode(prompts, tokens, self.repeats)
        observed = pb.RunObservation(
            decode_tokens_per_s_after=reply.tokens_per_s, tokens_generated=reply.tokens_generated, device=reply.device
        )
        return [domain.derive_run_completed(prior, trigger, observed)]
