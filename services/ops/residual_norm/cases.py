"""The inputs the judge draws for the residual norm's add_norm(a, x, weight, eps[, bias]).

The two row operands — the attention output `a` and the residual `x` — are the gated pair's (same shape and
layout, each drawn on its own: services.judge.pair_cases: the live shape first, value regimes, batched decode,
more rows than the live call, an odd width, non-contiguous layouts; and, its plan being the norm family's row
plan, both sides of each row dispatch limit, every residue of its rows per program, the class's other hidden
widths, on a GPU the served row range); each case adds the norm's state drawn as
the norm family's judge draws it (services.judge.cases: weights around one, signed, near zero, large, with
zeros; a bias far from zero for a LayerNorm) and an epsilon, which the op takes as an argument: a kernel must
use the one it is given. Deterministic in (spec, seed).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from services.judge import live_values
from services.judge.cases import MIXED, REGIMES, WEIGHTS, _bias, _generator, _weight
from services.judge.pair_cases import PairCase, PairSpec, draw_pair_cases
from services.judge.pair_cases import _case as pair_case
from services.ops.row_judging import EpsilonCase

EPSILONS = (1e-6, 1e-5)


@dataclass(frozen=True)
class AddNormCase(EpsilonCase):
    pair: PairCase  # pair.gate is the attention output a, pair.up the residual x
    weight: torch.Tensor
    bias: torch.Tensor | None
    eps: float

    @property
    def drawn(self) -> PairCase:
        return self.pair

    @property
    def layout(self) -> str:
        return self.pair.layout


def draw_add_norm_cases(
    spec: PairSpec, seed: int, bias: bool, live: tuple = (), live_sets: int = 0
) -> list[AddNormCase]:
    """The pair cases at the hidden width, each with a weight (its kind cycling through every kind), a bias when
    the norm has one, and an epsilon; then a case of every regime's rows on each of the served model's own post norm
    states (`live`: (set index, weight, bias or None, full), services.judge.live_values) of `live_sets` in all."""
    out = []
    for i, pair in enumerate(draw_pair_cases(spec, seed, alike=True)):  # both operands in each regime
        g = _generator(seed, "add-norm-state", i)
        weight = _weight(WEIGHTS[i % len(WEIGHTS)], pair.width, spec.dtype, g)
        out.append(AddNormCase(pair, weight, _bias(pair.width, spec.dtype, g) if bias else None, EPSILONS[i % 2]))
    for k, (index, weight, b, full) in enumerate(live):
        shape = (live_values.rows(full, spec.gpu, len(REGIMES)), int(weight.shape[0]))
        pair = pair_case(live_values.CASE, shape, MIXED, "contiguous", spec, _generator(seed, live_values.CASE, index),
                         alike=True)  # fmt: skip
        pair = replace(pair, name=live_values.name(index, max(live_sets, len(live)), shape))
        b = live_values.live_bias(b, weight, spec.dtype, bias)
        out.append(AddNormCase(pair, weight.to(spec.dtype), b, EPSILONS[k % 2]))
    return out


def flat(outputs) -> torch.Tensor:
    """The op's (normed, summed) as one 1-D tensor, normed first: what the child writes and the parent compares."""
    normed, summed = outputs
    return torch.cat([normed.reshape(-1), summed.reshape(-1)])
