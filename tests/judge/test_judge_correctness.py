"""The correctness layer in-process: each hostile behaviour is named by its own rule.

The candidates here are small Python functions standing in for a kernel's wrapper (the corpus in
tests/adversarial runs real Triton kernels through the sandbox); what is under test is the judge's
checking, against a real Qwen2RMSNorm as the oracle.
"""

from __future__ import annotations

import pytest
import torch
from judge_testkit import qwen_norm

from services.judge import correctness
from services.judge.poison import NAN_BYTE, POISON

SHAPES = [(2, 3, 64), (5, 64), (1, 2, 64)]
SEEDS = [11, 12, 13, 14, 15]


@pytest.fixture(autouse=True)
def poisoned_allocators():
    POISON.install()
    yield
    POISON.uninstall()


def _module(dtype=torch.float32):
    module = qwen_norm(64, dtype=dtype)
    with torch.no_grad():
        module.weight.copy_(1 + 0.1 * torch.randn(64, generator=torch.Generator().manual_seed(0)).to(dtype))
    return module


def _honest(module):
    def candidate(x):
        x32 = x.float()
        normed = (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + module.variance_epsilon)).to(x.dtype)
        return module.weight * normed

    return candidate


def _run(candidate_of, dtype=torch.float32, seeds=SEEDS) -> correctness.Tally:
    module = _module(dtype)
    case = correctness.Case(module, candidate_of(module), SHAPES)
    tally = correctness.Tally(seed_base=SEEDS[0])
    return correctness.check([case], dtype, torch.device("cpu"), seeds, tally)


def test_an_honest_forward_passes_with_per_dtype_errors():
    tally = _run(_honest, torch.bfloat16)
    assert not tally.error and tally.checks_run == tally.checks_passed == 15
    evidence = tally.evidence(torch.bfloat16, len(SEEDS))
    assert evidence.passed and evidence.seed_base == SEEDS[0]
    [errors] = evidence.errors
    assert errors.dtype == "bfloat16" and errors.checks == 15 and errors.atol == pytest.approx(1.6e-2)


@pytest.mark.parametrize(
    "rule,make",
    [
        ("nan-output", lambda m: lambda x: torch.empty(x.shape, dtype=x.dtype)),
        ("aliases-input", lambda m: lambda x: x.mul_(1.0)),
        ("modified-input", lambda m: lambda x: _honest(m)(x.clone()) + 0 * x.zero_()),
        ("modified-weights", lambda m: lambda x: _honest(m)(x) + 0 * m.weight.data.mul_(1.5).sum()),
        ("wrong-dtype-or-shape", lambda m: lambda x: _honest(m)(x).to(torch.bfloat16)),
        ("not-a-tensor", lambda m: lambda x: _honest(m)(x).as_subclass(_Lazy)),
        ("raised", lambda m: lambda x: 1 / 0),
        ("outside-tolerance", lambda m: lambda x: _honest(m)(x) * 1.01),
        ("nondeterministic", lambda m: lambda x: _keeps_leftovers(m, x)),
    ],
)
def test_each_hostile_behaviour_is_named_by_its_rule(rule, make):
    tally = _run(make)
    assert tally.rule_id == rule, tally.error
    assert tally.error.startswith("shape 2x3x64 seed 11: ")


class _Lazy(torch.Tensor):
    pass


def _keeps_leftovers(module, x):
    """Reads its output buffer first and keeps any finite value there: only NaN makes it compute."""
    out = torch.empty_like(x)
    honest = _honest(module)(x)
    return torch.where(torch.isnan(out), honest, out)


def test_the_poison_reaches_every_uninitialised_allocator():
    with POISON.filling(NAN_BYTE):
        made = [torch.empty(7), torch.empty_like(torch.ones(3, 5)), torch.empty_strided((2, 3), (3, 1)),
                torch.ones(4).new_empty(6)]  # fmt: skip
    assert all(torch.isnan(t).all() for t in made)
    assert not torch.isnan(torch.zeros(3)).any()
    POISON.uninstall()
    assert torch.empty is POISON.originals[("torch", "empty")]


def test_a_candidate_right_only_at_first_fails_the_recheck():
    module = _module()
    calls = {"n": 0}
    honest = _honest(module)

    def drifting(x):
        calls["n"] += 1
        return honest(x) * (1.0 if calls["n"] <= 21 else 1.5)  # 15 checks + 2 calls on each of 3 shapes

    case = correctness.Case(module, drifting, SHAPES)
    tally = correctness.check([case], torch.float32, torch.device("cpu"), SEEDS, correctness.Tally())
    assert not tally.error
    correctness.stress(case, (1, 64), torch.float32, torch.device("cpu"), 10, seed=1)
    correctness.check([case], torch.float32, torch.device("cpu"), [99], tally, twice=False)
    assert tally.rule_id == "outside-tolerance"
