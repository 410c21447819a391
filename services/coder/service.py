"""The coder service: answers SkillsRetrieved and CandidateJudged with the next proposal or a conclusion."""

from __future__ import annotations

from google.protobuf.message import Message

from services.coder import authors
from services.coder.domain import answered, decide
from services.core.events import Recorded


class CoderService:
    name = "coder"
    consumes = ("SkillsRetrieved", "CandidateJudged")

    def __init__(self, providers: dict | None = None, budget: authors.Budget | None = None) -> None:
        # The LLM APIs a run's author may name (services.coder.llm_providers); none: such a run's proposals are
        # recorded failures ("no such provider"), never a crash.
        self.providers = providers or {}
        self.budget = budget or authors.Budget()

    async def handle(self, trigger: Recorded, prior: list[Recorded]) -> list[Message]:
        # Rendering a template is a few string replacements: cheap enough for the event loop. Asking an LLM is
        # awaited (the message stays in progress meanwhile); its answer becomes the event by a pure derivation.
        out = []
        for item in decide(prior, trigger):
            if isinstance(item, authors.Ask):
                item = answered(prior, item, await authors.observe(prior, item, self.providers, self.budget))
            out.append(item)
        return out
