"""Correctness of a candidate against the module's own forward (runs inside the sandbox child).

Fresh random inputs per seed (the seeds start at a base drawn fresh for every judging, so no
candidate can carry answers for them), several shapes (the live one, odd row counts, an odd
width), every buffer the candidate allocates poisoned with NaN (services.judge.poison) so
unwritten output shows,
candidate and reference called in both orders on separate clones, the input and the module's
weights checked unmodified, the output checked to be a plain tensor that shares no memory with
them, the same input run twice under different allocator contents, and one tolerance table
(services.core.tolerances) where NaN/Inf never pass. Each failure names its rule (RULES).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from services.core.pb import events_pb2 as pb
from services.core.tolerances import comparable, tolerance, within
from services.judge.poison import NAN_BYTE, PATTERN_BYTE, POISON

RULES: dict[str, str] = {
    "load-failed": "the candidate must import and expose its entrypoint",
    "raised": "the candidate must not raise on a valid input",
    "not-a-tensor": "the output must be a plain torch.Tensor (no subclass, no lazy wrapper)",
    "wrong-dtype-or-shape": "the output must have the module's own dtype, shape and device",
    "aliases-input": "the output must not share memory with the input or the module's weights",
    "modified-input": "the candidate must leave its input unmodified",
    "modified-weights": "the candidate must leave the module's parameters unmodified",
    "nan-output": "NaN/Inf never pass (unwritten output reads as the judge's NaN poison)",
    "outside-tolerance": "the output must match the module's own forward within the dtype's tolerance",
    "nondeterministic": "the output must not depend on what the allocator left in memory",
    "drift": "the candidate must still be correct after the timing calls, and in the CUDA graph that was timed",
    "tampered": "the candidate must not patch what the judge measures with (timers, torch, the oracle)",
}
POISON_COPIES = 8  # freed blocks of each size filled with poison: more than a candidate allocates per call


class CheckFailed(Exception):
    def __init__(self, rule: str, message: str):
        super().__init__(message)
        self.rule = rule


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
    rule_id: str = ""
    shapes: list[str] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)
    errors: dict[str, list[float]] = field(default_factory=dict)  # dtype -> [checks, max abs, max rel]
    seed_base: int = 0
    stress_calls: int = 0

    def fail(self, rule: str, error: str) -> None:
        if not self.error:
            self.rule_id, self.error = rule, error

    def record(self, dtype: torch.dtype, max_abs: float, max_rel: float) -> None:
        name = str(dtype).removeprefix("torch.")
        row = self.errors.setdefault(name, [0, 0.0, 0.0])
        row[0] += 1
        row[1], row[2] = max(row[1], max_abs), max(row[2], max_rel)
        self.max_abs_err = max(self.max_abs_err, max_abs)
        self.max_rel_err = max(self.max_rel_err, max_rel)

    def evidence(self, dtype: torch.dtype, seeds: int) -> pb.CorrectnessEvidence:
        errors = []
        for name, (count, max_abs, max_rel) in self.errors.items():
            atol, rtol = tolerance(getattr(torch, name))
            errors.append(
                pb.DtypeError(
                    dtype=name, checks=int(count), max_abs_err=max_abs, max_rel_err=max_rel, atol=atol, rtol=rtol
                )
            )
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
            rule_id=self.rule_id,
            checks=self.checks,
            seed_base=self.seed_base,
            errors=errors,
            stress_calls=self.stress_calls,
        )


def shape_text(shape: tuple[int, ...]) -> str:
    return "x".join(str(d) for d in shape)


def poison_allocator(nbytes: list[int], device: torch.device, byte: int = NAN_BYTE) -> None:
    """Leave `byte` where the next allocations of these sizes will land (the CUDA caching allocator
    hands freed blocks back): memory that reaches the candidate other than through torch.empty."""
    blocks = []
    for size in dict.fromkeys(n for n in nbytes if n > 0):
        for _ in range(POISON_COPIES):
            blocks.append(torch.full((size,), byte, dtype=torch.uint8, device=device))
    del blocks  # freed last-in first-out: the candidate's next allocation of each size gets a poisoned block


def inputs(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, seed: int) -> torch.Tensor:
    gen = torch.Generator(device="cpu").manual_seed(seed)
    scale = (0.5, 1.0, 4.0)[seed % 3]  # small, unit and large activations
    return (torch.randn(shape, generator=gen) * scale).to(device=device, dtype=dtype)


def _storages(*tensors: torch.Tensor) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in tensors if t.untyped_storage().nbytes() > 0}


def _out_sizes(x: torch.Tensor, module: torch.nn.Module) -> list[int]:
    params = list(module.parameters())
    out_dtype = torch.promote_types(x.dtype, params[0].dtype) if params else x.dtype
    return [x.numel() * out_dtype.itemsize, x.numel() * 4, x.numel() * x.element_size()]


def _validate(case: Case, out, ref: torch.Tensor, x_candidate, x_keep, params_before) -> None:
    """Raise CheckFailed for the first way `out` is not an honest answer (before comparing values)."""
    if not torch.equal(x_candidate, x_keep):
        raise CheckFailed("modified-input", "the candidate modified its input")
    if any(not torch.equal(p.detach(), b) for p, b in zip(case.module.parameters(), params_before, strict=True)):
        raise CheckFailed("modified-weights", "the candidate modified the module's parameters")
    if type(out) is not torch.Tensor:
        raise CheckFailed("not-a-tensor", f"the candidate returned a {type(out).__name__}, not a plain torch.Tensor")
    if out.dtype != ref.dtype or out.shape != ref.shape or out.device != ref.device:
        raise CheckFailed(
            "wrong-dtype-or-shape",
            f"the candidate returned {out.dtype} {tuple(out.shape)} on {out.device}, "
            f"the module {ref.dtype} {tuple(ref.shape)} on {ref.device}",
        )
    if _storages(out) & _storages(x_candidate, *case.module.parameters()):
        raise CheckFailed("aliases-input", "the output shares memory with the input or the module's weights")


def compare_once(case: Case, x: torch.Tensor, candidate_first: bool) -> tuple[float, float]:
    """(max_abs_err, max_rel_err) of one call of candidate and reference on `x`; CheckFailed when wrong."""
    x_keep = x.clone()
    x_candidate, x_reference = x.clone(), x.clone()
    params_before = [p.detach().clone() for p in case.module.parameters()]

    def run_candidate() -> object:
        poison_allocator(_out_sizes(x, case.module), x.device)
        try:
            with POISON.filling(NAN_BYTE):
                return case.candidate(x_candidate)
        except Exception as exc:  # the candidate raising is a verdict, not a crash of the judge
            raise CheckFailed("raised", f"{type(exc).__name__}: {exc}") from exc

    with torch.no_grad():
        if candidate_first:
            out = run_candidate()
            ref = case.module(x_reference)
        else:
            ref = case.module(x_reference)
            out = run_candidate()
    _validate(case, out, ref, x_candidate, x_keep, params_before)
    ok, max_abs, max_rel = within(*comparable(out, ref, x.dtype))
    if ok:
        return max_abs, max_rel
    if not torch.isfinite(out.float()).all():
        raise CheckFailed("nan-output", "the output holds NaN or Inf (unwritten memory reads as the NaN poison)")
    raise CheckFailed("outside-tolerance", f"outside tolerance: max abs err {max_abs:.3g}, max rel err {max_rel:.3g}")


def same_under_any_memory(case: Case, x: torch.Tensor) -> None:
    """The same input twice: once with fresh memory full of NaN, once full of a finite pattern."""
    outs = []
    with torch.no_grad():
        for byte in (NAN_BYTE, PATTERN_BYTE):
            poison_allocator(_out_sizes(x, case.module), x.device, byte)
            with POISON.filling(byte):
                outs.append(case.candidate(x.clone()))
    first, second = outs
    if not isinstance(first, torch.Tensor) or not isinstance(second, torch.Tensor) or first.shape != second.shape:
        raise CheckFailed("nondeterministic", "two calls on the same input returned different kinds of result")
    if not within(second, first)[0]:
        raise CheckFailed("nondeterministic", "two calls on the same input differ: the output reads leftover memory")


def check(
    cases: list[Case], dtype: torch.dtype, device: torch.device, seeds: list[int], tally: Tally, *, twice: bool = True
) -> Tally:
    """Run every case x shape x seed, stopping at the first failure (its context goes into `error`)."""
    for case in cases:
        for shape in case.shapes:
            text = shape_text(shape)
            if text not in tally.shapes:
                tally.shapes.append(text)
            for index, seed in enumerate(seeds):
                x = inputs(shape, dtype, device, seed)
                tally.checks_run += 1
                try:
                    max_abs, max_rel = compare_once(case, x, candidate_first=index % 2 == 0)
                    if twice and index == 0:
                        same_under_any_memory(case, x)
                except CheckFailed as exc:
                    tally.fail(exc.rule, f"shape {text} seed {seed}: {exc}")
                    return tally
                except Exception as exc:  # anything else the candidate provoked (the oracle on its output ...)
                    tally.fail("raised", f"shape {text} seed {seed}: {type(exc).__name__}: {exc}")
                    return tally
                tally.record(_out_dtype(case, x), max_abs, max_rel)
                tally.checks_passed += 1
    return tally


def _out_dtype(case: Case, x: torch.Tensor) -> torch.dtype:
    params = list(case.module.parameters())
    return torch.promote_types(x.dtype, params[0].dtype) if params else x.dtype


def stress(case: Case, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, calls: int, seed: int) -> int:
    """Call the candidate `calls` times without checking (CPU stands in for the timing calls). Returns calls made."""
    x = inputs(shape, dtype, device, seed)
    with torch.no_grad():
        for _ in range(calls):
            case.candidate(x)
    return calls
