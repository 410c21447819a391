"""How a request picks its next token from the logits: greedy, or sampled with temperature and top-p.

A sampled request owns a generator seeded from its seed, so the same seed on the same server gives the
same tokens whatever else is being decoded beside it (each row's logits are its own).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.0  # 0: greedy (argmax)
    top_p: float = 1.0
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def problem(self) -> str | None:
        if not 0.0 <= self.temperature <= 100.0:
            return f"temperature must be 0..100 (0 = greedy), got {self.temperature}"
        if not 0.0 < self.top_p <= 1.0:
            return f"top_p must be in (0, 1], got {self.top_p}"
        return None


GREEDY = Sampling()


def generator(sampling: Sampling, device: torch.device) -> torch.Generator | None:
    if sampling.greedy:
        return None
    gen = torch.Generator(device=device)
    if sampling.seed is None:
        gen.seed()
    else:
        gen.manual_seed(sampling.seed)
    return gen


def choose(logits: torch.Tensor, sampling: Sampling, gen: torch.Generator | None) -> int:
    """The next token from one row of logits."""
    if sampling.greedy:
        return int(logits.argmax())
    probs = torch.softmax(logits.float() / sampling.temperature, dim=-1)
    if sampling.top_p < 1.0:
        # The smallest set of most likely tokens whose mass reaches top_p (the most likely one always kept).
        sorted_probs, order = probs.sort(descending=True)
        before = sorted_probs.cumsum(-1) - sorted_probs
        sorted_probs[before >= sampling.top_p] = 0.0
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
    return int(torch.multinomial(probs, 1, generator=gen))
