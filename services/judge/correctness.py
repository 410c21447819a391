"""Correctness of a candidate against the module's own forward (runs inside the sandbox child).

Fresh random inputs per seed, several shapes (the live one, odd row counts, an odd width),
inputs cloned and checked unmodified, the module's weights checked unmodified, candidate and
reference called in both orders, the allocator poisoned with NaN first so unwritten output
shows, and one tolerance table (services.core.tolerances) where NaN/Inf never pass.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from services.core.pb import events_pb2 as pb
from services.core.tolerances import within


@dataclass
class Case:
    """One module instance (the oracle) with the forward bound to the candidate, and the shapes to try."""

    module: torch.nn.Module
    candidate: Callable[[torch.Tensor], torch.Tensor]
    shapes: list[tuple[int, ...]]


@dataclass
class Tally:
    checks_run: int = 0
    checks_passed: int = 0
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    error: str = ""
    shapes: list[str] = field(default_factory=list)

    def evidence(self, dtype: torch.dtype, seeds: int) -> pb.CorrectnessEvidence:
        return pb.CorrectnessEvidence(
            passed=self.checks_run > 0 and self.checks_passed == self.checks_run and not self.error,
            checks_run=self.checks_run,
            checks_passed=self.checks_passed,
            max_abs_err=self.max_abs_err,
            max_rel_err=self.max_rel_err,
            dtype=str(dtype).removeprefix("torch."),
            shapes=self.shapes,
            seeds=seeds,
            error=self.error,
            interpreted=os.environ.get("TRITON_INTERPRET") == "1",
        )


def shape_text(shape: tuple[int, ...]) -> str:
    return "x".join(str(d) for d in shape)


def _poison_allocator(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> None:
    """Leave NaN where the next allocation of this size is likely to land, so unwritten output is caught."""
    poison = torch.full(shape, float("nan"), dtype=dtype, device=device)
    del poison


def _inputs(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, seed: int) -> torch.Tensor:
    gen = torch.Generator(device="cpu").manual_seed(seed)
    scale = (0.5, 1.0, 4.0)[seed % 3]  # small, unit and large activations
    return (torch.randn(shape, generator=gen) * scale).to(device=device, dtype=dtype)


def comparable(out: torch.Tensor, ref: torch.Tensor, input_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """`out` and `ref` in the dtype whose tolerance applies: the least precise the op passes through.

    HF's RMSNorm rounds the normalised row to the input dtype before the weight multiply, so with an
    fp32 weight and bf16 activations the fp32 output legitimately differs by a bf16 rounding step.
    """
    if input_dtype.is_floating_point and input_dtype.itemsize < ref.dtype.itemsize:
        return out.to(input_dtype), ref.to(input_dtype)
    return out, ref


def compare_once(case: Case, x: torch.Tensor, candidate_first: bool) -> tuple[bool, float, float, str]:
    """(passed, max_abs_err, max_rel_err, error) of one call of candidate and reference on `x`."""
    x_keep = x.clone()
    x_candidate, x_reference = x.clone(), x.clone()
    params_before = [p.detach().clone() for p in case.module.parameters()]

    def run_candidate() -> object:
        out_dtype = torch.promote_types(x.dtype, params_before[0].dtype) if params_before else x.dtype
        _poison_allocator(tuple(x.shape), out_dtype, x.device)
        return case.candidate(x_candidate)

    with torch.no_grad():
        if candidate_first:
            out = run_candidate()
            ref = case.module(x_reference)
        else:
            ref = case.module(x_reference)
            out = run_candidate()
    if not torch.equal(x_candidate, x_keep):
        return False, float("inf"), float("inf"), "the candidate modified its input"
    if any(not torch.equal(p.detach(), b) for p, b in zip(case.module.parameters(), params_before, strict=True)):
        return False, float("inf"), float("inf"), "the candidate modified the module's parameters"
    if not isinstance(out, torch.Tensor):
        return False, float("inf"), float("inf"), f"the candidate returned a {type(out).__name__}, not a tensor"
    if out.dtype != ref.dtype or out.shape != ref.shape:
        return (
            False,
            float("inf"),
            float("inf"),
            f"the candidate returned {out.dtype} {tuple(out.shape)}, the module {ref.dtype} {tuple(ref.shape)}",
        )
    ok, max_abs, max_rel = within(*comparable(out, ref, x.dtype))
    if ok:
        return True, max_abs, max_rel, ""
    if not torch.isfinite(out.float()).all():
        return False, max_abs, max_rel, "the candidate's output holds NaN or Inf"
    return False, max_abs, max_rel, f"outside tolerance: max abs err {max_abs:.3g}, max rel err {max_rel:.3g}"


def check(cases: list[Case], dtype: torch.dtype, device: torch.device, seeds: list[int], tally: Tally) -> Tally:
    """Run every case x shape x seed, stopping at the first failure (its context goes into `error`)."""
    for case in cases:
        for shape in case.shapes:
            text = shape_text(shape)
            if text not in tally.shapes:
                tally.shapes.append(text)
            for seed in seeds:
                x = _inputs(shape, dtype, device, seed)
                tally.checks_run += 1
                try:
                    ok, max_abs, max_rel, error = compare_once(case, x, candidate_first=seed % 2 == 0)
                except Exception as exc:  # the candidate raising is a verdict, not a crash of the judge
                    ok, max_abs, max_rel, error = False, float("inf"), float("inf"), f"{type(exc).__name__}: {exc}"
                tally.max_abs_err = max(tally.max_abs_err, max_abs)
                tally.max_rel_err = max(tally.max_rel_err, max_rel)
                if not ok:
                    tally.error = f"shape {text} seed {seed}: {error}"
                    return tally
                tally.checks_passed += 1
    return tally
