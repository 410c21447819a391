"""Who writes a run's kernels: the port (`RunRequested.author`).

- "" or "template": the templates' search (each family's, services.ops.template, chosen in services.coder.domain); every
  event a pure function of the log.
- "gemini", "openai-compatible": an LLM asked for kernel source + a launch plan (services.coder.llm_providers).
  The domain decides *that* the model is asked and what (an `Ask`, pure); the service asks (`observe`: the only
  I/O, within the run's budget of calls and tokens) and the domain derives the event from the recorded answer
  (`domain.answered`), so replay re-derives it without calling anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from services.coder import llm_prompt
from services.core.events import Recorded
from services.core.pb import events_pb2 as pb

TEMPLATE = "template"
GEMINI = "gemini"
OPENAI_COMPATIBLE = "openai-compatible"
LLM_AUTHORS = (GEMINI, OPENAI_COMPATIBLE)
AUTHORS = (TEMPLATE, *LLM_AUTHORS)
# Asked at temperature 0 with this seed: as repeatable as the provider makes it (replay never depends on it).
SEED = 20260101


def is_llm(author: str) -> bool:
    return author in LLM_AUTHORS


@dataclass(frozen=True, eq=False)
class Ask:
    """One question to an LLM author for one candidate of a target (pure data, derived from the log)."""

    provider: str
    target_class: str
    family: str
    variant: str
    contract: pb.Contract
    attempt: int
    system: str
    prompt: str


def ask(
    prior: list[Recorded], provider: str, target: str, family: str, variant: str, contract: pb.Contract, *, attempt: int
) -> Ask:
    prompt = llm_prompt.user_prompt(prior, target, family, variant, contract, attempt)
    return Ask(provider, target, family, variant, contract, attempt, llm_prompt.SYSTEM, prompt)


# ------------------------------------------------------------------ the budget (pure)


@dataclass(frozen=True)
class Budget:
    """A run's LLM budget (settings: YANTRA_LLM_MAX_CALLS, YANTRA_LLM_MAX_TOKENS), and a call's shape."""

    max_calls: int = 12
    max_tokens: int = 300_000
    retries: int = 2


def observations(prior: list[Recorded]) -> list[pb.AuthorObservation]:
    """Every LLM answer (or failure to get one) the run's log records, in log order."""
    found = []
    for rec in prior:
        if rec.type in ("CandidateProposed", "TargetConcluded"):
            msg = rec.msg
            if msg.HasField("observed"):
                found.append(msg.observed)
    return found


def spent(prior: list[Recorded], budget: Budget) -> tuple[int, int]:
    """(requests, tokens) the run's LLM author has spent so far, as its log records them."""
    seen = observations(prior)
    return sum(o.attempts for o in seen), sum(o.prompt_tokens + o.answer_tokens for o in seen)


def budget_problem(prior: list[Recorded], budget: Budget) -> str:
    """Why the run may not ask the model again ("" when it may)."""
    calls, tokens = spent(prior, budget)
    if calls >= budget.max_calls:
        return f"budget spent: {calls} of {budget.max_calls} requests made"
    if tokens >= budget.max_tokens:
        return f"budget spent: {tokens} of {budget.max_tokens} tokens used"
    return ""


# ------------------------------------------------------------------ the port


class LlmProvider(Protocol):
    """An LLM API that answers an `Ask` with an observation (services.coder.llm_providers)."""

    name: str
    model: str

    async def answer(self, ask: Ask, *, attempts: int) -> pb.AuthorObservation:
        """Ask at most `attempts` times (retrying only 429s, 5xx and timeouts); never raises for what the API or
        the network did: that is recorded in the observation."""
        ...


async def observe(
    prior: list[Recorded], ask: Ask, providers: dict[str, LlmProvider], budget: Budget
) -> pb.AuthorObservation:
    """The answer to `ask`, within the run's budget: the coder's only I/O. Whatever happens is an observation."""
    provider = providers.get(ask.provider)
    limits = {"max_calls": budget.max_calls, "max_tokens": budget.max_tokens}
    if provider is None:
        return pb.AuthorObservation(provider=ask.provider, error="no such provider in this coder", **limits)
    problem = budget_problem(prior, budget)
    if problem:
        return pb.AuthorObservation(provider=provider.name, model=provider.model, error=problem, **limits)
    calls, _ = spent(prior, budget)
    try:
        observed = await provider.answer(ask, attempts=min(1 + budget.retries, budget.max_calls - calls))
    except Exception as exc:  # a provider's own bug is recorded like any failure, never a crash of the coder
        observed = pb.AuthorObservation(provider=provider.name, model=provider.model, error=f"{type(exc).__name__}")
    observed.max_calls, observed.max_tokens = budget.max_calls, budget.max_tokens
    return observed
