"""Judging a plain MLP's activation: single operands of the live intermediate width (the gated pair's gates), torch's
own formula as the oracle (the variant the server saw the module compute), the family's op called on each in the
child. The maps around it are the model's own code and not the candidate's."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from services.judge.cases import CPU_BOUNDARY_ROWS, PAD, apply_layout
from services.judge.module_factory import ModuleBuildError, torch_dtype
from services.judge.pair_cases import draw_pair_cases
from services.judge.rounding import FP32_U, honest_bound, unit_roundoff
from services.judge.subjects import OpSubject, laid_out, timing_shapes
from services.judge.verdict import ACT_ULPS, ACT_UNDERFLOW, Reference, checked_reference, exact_as_served
from services.ops import plain_mlp
from services.ops.gated_mlp.judging import pair_spec
from services.ops.protocol import CaseSet, ChildContext, JudgeAsk

CPU_BOUNDARY = CPU_BOUNDARY_ROWS  # its plan's dispatch limits are row counts, as a norm's

# GPT-2's gelu_new in eager is seven torch ops after the cube, each rounding to the dtype: the module's own answer
# is off the exact one by up to that many roundings of |x| and of the answer (and 1 + tanh cancels where x is very
# negative, absolutely, at |x|'s scale). An honest fused kernel rounds once; both must pass.
EAGER_ROUNDINGS = 8


@dataclass(frozen=True)
class Operands:
    operands: list
    layouts: list


def references(cases: list, variant: str) -> list[Reference]:
    """One Reference per case: torch's own formula (HF's module, op by op) in the live dtype (`own`) and in float64
    (`hi`, rounded only where it overflows the dtype)."""
    fn = plain_mlp.reference(variant)
    out = []
    for case in cases:
        x = apply_layout(case.gate, case.layout, case.width)
        with torch.no_grad():
            own = fn(x)
            exact = fn(x.double())
        hi = exact_as_served(exact, own.dtype)
        bound = honest_bound([x.dtype, own.dtype], reduce_len=1, numel=own.numel())
        xd = x.double().abs()
        scale = hi.abs() + xd
        info = torch.finfo(own.dtype)
        term = (EAGER_ROUNDINGS * unit_roundoff(own.dtype) + ACT_ULPS * FP32_U * (1 + xd)) * scale
        term = term + max(info.smallest_normal * info.eps, ACT_UNDERFLOW) * (1 + xd)
        out.append(checked_reference(case.name, "torch's own activation", own, hi, bound, term))
    return out


def prepare(ask: JudgeAsk) -> CaseSet:
    """On a GPU the served row range too; no other widths (the profile's are hidden widths, not intermediate
    ones)."""
    target, proposal = ask.target, ask.proposal
    intro = target.introspection
    if target.computes not in plain_mlp.VARIANTS:
        raise ModuleBuildError(f"the profile does not say which activation {intro.class_path} computes")
    children = {c.name: tuple(c.shape) for c in intro.children}
    shapes = {b.param: children.get(b.attr, ()) for b in proposal.contract.bindings}
    hidden = int(target.input_shape[-1]) if target.input_shape else 0
    if not hidden or plain_mlp.roles_problem(shapes):
        raise ModuleBuildError(f"the profile records no input shape or no fc and proj maps of {intro.class_path}")
    width = plain_mlp.intermediate_width(shapes, hidden)
    live = tuple(target.input_shape)[:-1] + (width,)
    cases = draw_pair_cases(pair_spec(ask, width, live), ask.seed_base)  # the gated pair's: the op reads the gates
    operands = Operands([c.gate for c in cases], [c.layout for c in cases])
    size = torch_dtype(ask.dtype).itemsize
    return CaseSet(cases, references(cases, target.computes), operands, width, live, ask.dtype, ask.dtype,
                   (size, size, size))  # fmt: skip


def oracle(variant: str):
    """torch's activation (HF's module, op by op) as a module, for the timing's baselines (eager, torch.compile)
    and its replay check; it counts the bytes the fused op must move."""
    fn = plain_mlp.reference(variant)

    class ActivationReference(torch.nn.Module):
        def forward(self, x):
            return fn(x)

        @staticmethod
        def native_op(x):  # torch's own fused op for the same formula (GELU's tanh form: one kernel)
            if variant != "mlp_gelu_tanh":
                raise NotImplementedError(f"torch has no fused op for {variant}")
            return torch.nn.functional.gelu(x, approximate="tanh")

        @staticmethod
        def bytes_moved(x) -> int:
            return plain_mlp.bytes_moved(x.numel(), x.element_size())

    return ActivationReference().eval()


class UnarySubject(OpSubject):
    """The family's op called on each case's one operand."""

    def __init__(self, ctx: ChildContext):
        super().__init__(ctx, len(ctx.operands.operands))

    def bases(self, index: int) -> list:
        return [self.operands.operands[index]]

    def view(self, index: int):
        layout = self.operands.layouts[index]
        width = int(self.operands.operands[index].shape[-1]) - (PAD if layout == "row-strided" else 0)
        return laid_out(layout, width)

    def timed(self):
        return oracle(self.job["variant"]), self.op, timing_shapes(self.job, int(self.job["width"]))

    def stress_input(self, dtype):
        return torch.randn(1, int(self.job["width"])).to(device=self.device, dtype=dtype)


def subject(ctx: ChildContext) -> UnarySubject:
    return UnarySubject(ctx)
