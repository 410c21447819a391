"""Correctness, decided in the judge's own process from what the sandbox child returned.

The child only ran the candidate on the cases and wrote the outputs; this module computed the
references itself, before the child started, in a process the candidate never touched: the live
module's own forward on each case in its dtype (`own`) and in fp32 (`hi`). The candidate's output
is compared with `hi` under the bound an honest kernel in the dtypes involved can reach
(services.judge.rounding); `own` must pass the same bound, or the bound is wrong and nothing is
believed. Passes and failures are counted here; the child's facts (a raise, a changed input, broken
guard bytes) are read as data, never as a verdict.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field, replace

import torch

from services.core.pb import events_pb2 as pb
from services.core.shapes import shape_text
from services.core.tolerances import same_bits
from services.judge import sampled_grid
from services.judge.cases import Case
from services.judge.rounding import Bound, compare

RULES: dict[str, str] = {
    "load-failed": "the candidate's kernels must load behind its op family's wrapper",
    "raised": "the candidate must not raise on a valid input",
    "not-a-tensor": "the output must be a plain torch.Tensor (no subclass, no lazy wrapper)",
    "wrong-dtype-or-shape": "the output must have the module's own dtype and shape",
    "aliases-input": "the output must not share memory with the input or the module's weights",
    "modified-input": "the candidate must leave its input unmodified",
    "modified-weights": "the candidate must leave the module's parameters unmodified",
    "guard-bytes": "nothing may be written outside the call's tensors (canary bytes around each, checked per call)",
    "nan-output": "NaN/Inf only where the module's own output has them (unwritten output reads as NaN poison)",
    "missing-nonfinite": "where the module's own output is NaN/Inf the candidate's must be too",
    "outside-tolerance": "as close to a higher-precision reference as an honest kernel in its dtypes can be",
    "biased-output": "the mean signed error must stay within what rounding explains: a systematic bias is wrong",
    "nondeterministic": "the same answer called as production calls it: no guard bytes, no poison, plain memory",
    "ghost": "the output must come from the kernel: skipping its launch must change the answer",
    "drift": "the candidate must still be correct after the timing calls, and in the CUDA graph that was timed",
    "tampered": "nothing the judge measures with may be replaced (timers, torch, the oracle)",
    "missing-outputs": "the child must return one readable output per case",
    "judge-bound": "the module's own output must pass the bound the judge derived (else the bound is wrong)",
    "boundary-undrawn": "a plan dispatches only at sizes the judge draws both sides of (on CPU, the interpreter's)",
}


class BoundError(RuntimeError):
    """The module's own output does not pass the honest bound: the judge's derivation is wrong here."""


@dataclass(frozen=True)
class Reference:
    hi: torch.Tensor  # the module on fp32 copies: the reference the candidate is held to
    own: torch.Tensor  # the module in its own dtypes: what the model computes today
    bound: Bound
    row_error: torch.Tensor | None = None  # a centred norm's per-row term (rounding.centred_row_error)


def checked_reference(name: str, whose: str, own: torch.Tensor, hi: torch.Tensor, bound: Bound, term=None) -> Reference:
    """The case's Reference once the live code's own output (`whose`, as the error names it) passes the honest
    bound it derived; BoundError when it does not (the derivation is wrong, nothing is believed)."""
    check = compare(own, hi, bound, term)
    if not check.ok:
        raise BoundError(f"{name}: {whose} fails the honest bound ({check.rule}: {check.detail})")
    return Reference(hi=hi, own=own, bound=bound, row_error=term)


def exact_as_served(exact: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A float64 reference, rounded to `dtype` only where it overflows it: an honest kernel overflows there too."""
    rounded = exact.to(dtype)
    return torch.where(torch.isinf(rounded) & torch.isfinite(exact), rounded.double(), exact)


# The activation's own fp32 error, in units of fp32's roundoff per unit of |gate|: exp's argument is rounded
# (|g|·2**-24 relative in exp(g)), and tanh near ±1 cancels in 1 + tanh (an absolute error of a few 2**-24
# times |g|·|up| where GELU's output is nearly zero). An honest fp32 kernel and torch's differ by that much.
ACT_ULPS = 8.0
ACT_UNDERFLOW = 2.0**-120  # what an fp32 activation may flush to zero (pair_references)


@dataclass
class _Tally:
    run: int = 0
    passed: int = 0
    rule: str = ""
    error: str = ""
    max_abs: float = 0.0
    max_rel: float = 0.0
    max_ratio: float = 0.0
    max_bias: float = 0.0
    errors: dict[str, list] = field(default_factory=dict)  # dtype -> [checks, max abs, max rel, bound, row term]

    def fail(self, rule: str, error: str) -> None:
        if not self.error:
            self.rule, self.error = rule, error


def _load(blob: bytes) -> dict | None:
    try:
        data = torch.load(io.BytesIO(blob), weights_only=True)  # tensors and plain containers only: no code
    except Exception:
        return None
    return data if isinstance(data, dict) else None


def _check_output(tally: _Tally, case: Case, ref: Reference, out, when: str = "") -> bool:
    tally.run += 1
    where = f"{when}{case.name}"
    if type(out) is not torch.Tensor:
        tally.fail("missing-outputs" if out is None else "not-a-tensor", f"{where}: no output tensor came back")
        return False
    if out.dtype != ref.own.dtype or tuple(out.shape) != tuple(ref.own.shape):
        tally.fail(
            "wrong-dtype-or-shape",
            f"{where}: the candidate returned {out.dtype} {tuple(out.shape)}, the module {ref.own.dtype} "
            f"{tuple(ref.own.shape)}",
        )
        return False
    kind = sampled_grid.kind_of(case.name)
    if kind:  # a sample of the programs ran: the rows they wrote, each whole (an MLP's: the elements they wrote)
        ref, out = _sampled(tally, where, ref, out, case.width, rows=kind != sampled_grid.SAMPLED_ELEMENTS_CASE)
        if ref is None:
            return False
    result = compare(out, ref.hi, ref.bound, ref.row_error)
    # The figures count whether or not the check passed: a rejection's evidence shows the error that sank it.
    name = str(out.dtype).removeprefix("torch.")
    row = tally.errors.setdefault(name, [0, 0.0, 0.0, ref.bound, 0.0])
    row[0] += 1
    row[1], row[2] = max(row[1], result.max_abs), max(row[2], result.max_rel)
    if ref.row_error is not None and ref.row_error.numel():
        row[4] = max(row[4], float(torch.nan_to_num(ref.row_error, nan=0.0, posinf=0.0).max()))
    tally.max_abs, tally.max_rel = max(tally.max_abs, result.max_abs), max(tally.max_rel, result.max_rel)
    tally.max_ratio = max(tally.max_ratio, result.max_ratio)
    tally.max_bias = max(tally.max_bias, abs(result.bias))
    if not result.ok:
        tally.fail(result.rule, f"{where}: {result.detail}")
        return False
    tally.passed += 1
    return True


def _sampled(
    tally: _Tally, where: str, ref: Reference, out: torch.Tensor, width: int, rows: bool = True
) -> tuple[Reference | None, torch.Tensor]:
    """What a sampled case's programs wrote, and its references: the rows (of `width`: a family that flattens its
    outputs keeps them whole), each whole, or with `rows` False the elements (an MLP's programs write blocks of
    elements). (None, out) with the failure counted when a written row is partly poison (lanes a program left
    unwritten)."""
    count = out.numel() // width

    def whole(t: torch.Tensor) -> torch.Tensor:  # (rows, width); a term of one a row broadcast along it
        return t.reshape(-1, 1).expand(-1, width) if t.numel() == count else t.reshape(-1, width)

    if rows:
        written, partial = sampled_grid.touched_rows(out.reshape(-1, width))
        if partial is not None:
            tally.fail("nan-output", f"{where}: row {partial:,} was written in part (the rest is the output's poison)")
            return None, out
    else:
        written = sampled_grid.written_elements(out.reshape(-1, width))

    def pick(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else whole(t)[written]

    return replace(ref, hi=pick(ref.hi), own=pick(ref.own), row_error=pick(ref.row_error)), pick(out)


def _child_problem(tally: _Tally, cases: list[Case], problems, when: str = "") -> bool:
    if not problems:
        return False
    first = min(problems, key=lambda p: int(p.get("case", 0)))
    index = int(first.get("case", 0))
    name = cases[index].name if 0 <= index < len(cases) else f"case {index}"
    tally.fail(str(first.get("rule", "raised")), f"{when}{name}: {first.get('detail', '')}")
    return True


def _prefilled(tally: _Tally, cases: list[Case], refs: list[Reference], data: dict) -> bool:
    """The cases the child ran again with their output's memory holding another case's answer (the donor's, of the
    same shape; drawn from the judging's seed): each answer must be its own case's. False once one fails."""
    pairs, outs = data.get("prefilled_cases"), data.get("prefilled")
    if not isinstance(pairs, list) or not isinstance(outs, list) or len(pairs) != len(outs):
        tally.fail("missing-outputs", "the child returned no outputs of the cases run with pre-filled outputs")
        return False
    for pair, out in zip(pairs, outs, strict=True):
        try:
            case, donor = (int(i) for i in pair)
        except (TypeError, ValueError):
            case = donor = -1
        if not (0 <= case < len(cases) and 0 <= donor < len(cases)) or case == donor:
            tally.fail("missing-outputs", f"the child named no two cases for a pre-filled run ({pair!r})")
            return False
        if not _check_output(
            tally, cases[case], refs[case], out, f"its output pre-filled with {cases[donor].name}'s answer, "
        ):
            return False
    return True


def judge_outputs(
    cases: list[Case], refs: list[Reference], facts: dict, blob: bytes, *, first_pass: bool = False
) -> _Tally:
    """Count passes and failures of the child's outputs against the parent's references (first failure kept).

    `first_pass`: the child has run every case once and waits for the go-ahead to time it; what comes after
    (drift) is not there yet.
    """
    tally = _Tally()
    if not facts.get("loaded"):
        tally.fail("load-failed", str(facts.get("load_error") or facts.get("child_error") or "did not load"))
        return tally
    if facts.get("tampered"):
        tally.fail("tampered", str(facts["tampered"]))
        return tally
    if _child_problem(tally, cases, facts.get("problems")):
        return tally
    data = _load(blob)
    outputs = data.get("outputs") if data else None
    if not isinstance(outputs, list) or len(outputs) != len(cases):
        tally.fail("missing-outputs", f"the child returned no readable output list for the {len(cases)} cases")
        return tally
    for case, ref, out in zip(cases, refs, outputs, strict=True):
        if not _check_output(tally, case, ref, out):
            return tally
    second, ghost = data.get("second"), data.get("ghost")
    if type(second) is not torch.Tensor or not same_bits(second, outputs[0]):
        tally.fail("nondeterministic", f"{cases[0].name}: the same input, called as production calls it, differs")
        return tally
    if type(ghost) is not torch.Tensor or same_bits(ghost, outputs[0]):
        tally.fail("ghost", f"{cases[0].name}: with the kernel launch skipped the wrapper returns the same answer")
        return tally
    if not _prefilled(tally, cases, refs, data):
        return tally
    if first_pass:
        return tally
    if facts.get("drift"):
        tally.fail("drift", str(facts["drift"]))
        return tally
    if _child_problem(tally, cases, facts.get("after_problems"), "after the timing calls, "):
        tally.rule = "drift"
        return tally
    for problem in facts.get("call_problems") or []:  # the timing (or further) calls: no case's, its own rule
        tally.fail(str(problem.get("rule", "raised")), str(problem.get("detail", "")))
        return tally
    after = data.get("after")
    if not isinstance(after, list) or not after:
        tally.fail("missing-outputs", "the child returned no outputs for the re-check after the timing calls")
        return tally
    for case, ref, out in zip(cases, refs, after, strict=False):
        if not _check_output(tally, case, ref, out, "after the timing calls, "):
            tally.rule = "drift"
            return tally
    return tally


def evidence(
    tally: _Tally, cases: list[Case], *, seed_base: int, dtype: str, facts: dict, interpreted: bool
) -> pb.CorrectnessEvidence:
    errors = [
        pb.DtypeError(
            dtype=name, checks=int(n), max_abs_err=a, max_rel_err=r, atol=bound.abs, rtol=bound.rel, row_atol=row
        )
        for name, (n, a, r, bound, row) in tally.errors.items()
    ]
    return pb.CorrectnessEvidence(
        passed=tally.run > 0 and tally.passed == tally.run and not tally.error,
        checks_run=tally.run,
        checks_passed=tally.passed,
        max_abs_err=tally.max_abs,
        max_rel_err=tally.max_rel,
        dtype=dtype,
        shapes=list(dict.fromkeys(shape_text(c.shape) for c in cases)),
        seeds=len(cases),
        error=tally.error,
        interpreted=interpreted,
        rule_id=tally.rule,
        checks=CHECKS + sampled_grid.described(facts.get("sampled"), [c.name for c in cases]),
        seed_base=seed_base,
        errors=errors,
        stress_calls=int(facts.get("stress_calls", 0)),
        regimes=sorted({c.regime for c in cases}),
        max_ulp_err=tally.max_ratio,
        max_bias=tally.max_bias,
        cases=len(cases),
    )


CHECKS = [
    "cases drawn by the parent (services.judge.cases): the live shape, batched decode, every row-count residue, "
    "more rows than live, an odd width, every width the profile saw, the served row range (GPU), value regimes "
    "(normal, huge, outlier channels, zero rows, tiny, non-finite, log-scale, offset, repeated rows, leading "
    "zeros, spike-walk), weights drawn apart from the module's init, non-contiguous layouts",
    "references computed by the parent before the child started: the module's own forward in fp32 (held to) "
    "and in its dtypes (must pass the same bound)",
    "bound from the dtypes' rounding and the reduction length; a mean signed error beyond rounding is a bias",
    "child facts read as data: raised, output not a plain tensor or aliasing, input or weight changed (bit for bit "
    "against a CPU copy), guard bytes around every tensor of the call",
    "the first case again as production calls it (plain memory, random bytes in the output): the same bits; "
    "the launch skipped: a different answer",
    "some cases again (drawn from the seed) with their output's memory holding another case's answer of the same "
    "shape: their own answer",
    "the first cases again after the timing calls (GPU) or 48 further calls (CPU)",
]
