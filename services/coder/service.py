"""The coder service: answers SkillsRetrieved and CandidateJudged with the next proposal or a conclusion."""

from __future__ import annotations

from google.protobuf.message import Message

from services.coder.domain import decide
from services.core.events import Recorded


class CoderService:
    name = "coder"
    consumes = ("SkillsRetrieved", "CandidateJudged")

    async def handle(self, trigger: Recorded, prior: list[Recorded]) -> list[Message]:
        # Rendering a template is a few string replacements: cheap enough for the event loop.
        return decide(prior, trigger)
