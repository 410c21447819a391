"""Judging a gated MLP's act(gate) * up: (gate, up) operand pairs of the live intermediate width, torch's formula
as the oracle (the variant the server saw the module compute), the family's op called on each pair in the child.
The layer around it (the projections) is the model's own code and not the candidate's."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from services.judge.cases import CPU_BOUNDARY_ROWS, PAD, apply_layout
from services.judge.module_factory import ModuleBuildError, torch_dtype
from services.judge.pair_cases import PairSpec, draw_pair_cases
from services.judge.rounding import FP32_U, honest_bound
from services.judge.subjects import OpSubject, laid_out, timing_shapes
from services.judge.verdict import ACT_ULPS, ACT_UNDERFLOW, Reference, checked_reference, exact_as_served
from services.ops import elementwise, gated_mlp
from services.ops.protocol import CaseSet, ChildContext, JudgeAsk

CPU_BOUNDARY = CPU_BOUNDARY_ROWS  # its plan's dispatch limits are row counts, as a norm's


@dataclass(frozen=True)
class Operands:
    gates: list
    ups: list
    layouts: list


def references(cases: list, variant: str) -> list[Reference]:
    """One Reference per (gate, up) case: torch's act(gate) * up in the live dtype (`own`) and in float64 (`hi`,
    rounded to the dtype only where it overflows it: an honest kernel overflows there too)."""
    fn = gated_mlp.reference(variant)
    cancels = 1.0 if variant.startswith("geglu") else 0.0  # 0.5·g·(1 + tanh(·)) near zero: absolute, not relative
    out = []
    for case in cases:
        g = apply_layout(case.gate, case.layout, case.width)
        u = apply_layout(case.up, case.layout, case.width)
        with torch.no_grad():
            own = fn(g, u)
            exact = fn(g.double(), u.double())
        hi = exact_as_served(exact, own.dtype)
        bound = honest_bound([g.dtype, own.dtype], reduce_len=1, numel=own.numel())
        gd, ud = g.double().abs(), u.double().abs()
        # Near zero rounding is absolute: the activation's (a dtype subnormal's spacing; fp32 flushing denormals, as
        # GPU kernels and some CPUs do; SiLU's x / (1 + exp(-x)) is -0 once exp(-x) overflows fp32, where the true
        # value is under 88.7 * exp(-88.7) < 2**-120) times |up|, and the product's own.
        info = torch.finfo(own.dtype)
        underflow = max(info.smallest_normal * info.eps, ACT_UNDERFLOW)
        act_term = ACT_ULPS * FP32_U * (1 + gd) * (hi.abs() + cancels * gd * ud) + underflow * (1 + ud)
        out.append(checked_reference(case.name, "torch's own act(gate) * up", own, hi, bound, act_term))
    return out


def pair_spec(ask: JudgeAsk, width: int, live: tuple[int, ...]) -> PairSpec:
    """What (gate, up) pairs an elementwise op's judging draws (services.judge.pair_cases): its intermediate `width`
    at its `live` shape, every residue of the plan's elements per program; on a GPU the served row range too (the
    operands carry the hidden rows). The plain MLP's single operands are the gates of the same pairs."""
    blocks = tuple(elementwise.parse_grid(launch.grid) for launch in ask.proposal.plan.launches)
    return PairSpec(
        width, live, torch_dtype(ask.dtype), ask.gpu, blocks, examples=ask.examples // 2,
        domain_rows=ask.target.max_rows,  # the operands' rows are the hidden rows: the served range of them
    )  # fmt: skip


def prepare(ask: JudgeAsk) -> CaseSet:
    """(gate, up) pairs of the live intermediate width; on a GPU the served row range too (the operands carry the
    hidden rows); no other widths: the profile's are hidden widths, not intermediate ones."""
    target, proposal = ask.target, ask.proposal
    intro = target.introspection
    children = {c.name: tuple(c.shape) for c in intro.children}
    shapes = {b.param: children.get(b.attr, ()) for b in proposal.contract.bindings}
    width = gated_mlp.intermediate_width(shapes)
    if target.computes not in gated_mlp.VARIANTS:
        raise ModuleBuildError(f"the profile does not say which activation {intro.class_path} computes")
    live = tuple(target.input_shape)[:-1] + (width,) if target.input_shape else (1, width)
    cases = draw_pair_cases(pair_spec(ask, width, live), ask.seed_base)
    operands = Operands([c.gate for c in cases], [c.up for c in cases], [c.layout for c in cases])
    size = torch_dtype(ask.dtype).itemsize
    return CaseSet(cases, references(cases, target.computes), operands, width, live, ask.dtype, ask.dtype,
                   (size, size, size))  # fmt: skip


def oracle(variant: str):
    """torch's act(gate) * up as a module of one stacked (2, ..., width) input, for the timing's baselines (eager,
    torch.compile) and its replay check; it counts the bytes the fused op must move."""
    fn = gated_mlp.reference(variant)

    class GatedReference(torch.nn.Module):
        reads_per_write = 2  # its floor is at a binary elementwise op's ceiling (services.judge.timing)

        def forward(self, gu):
            return fn(gu[0], gu[1])

        @staticmethod
        def bytes_moved(gu) -> int:
            return gated_mlp.bytes_moved(gu[0].numel(), gu.element_size())

    return GatedReference().eval()


class PairSubject(OpSubject):
    """The family's op called on each case's (gate, up)."""

    def __init__(self, ctx: ChildContext):
        super().__init__(ctx, len(ctx.operands.gates))

    def bases(self, index: int) -> list:
        return [self.operands.gates[index], self.operands.ups[index]]

    def view(self, index: int):
        layout = self.operands.layouts[index]
        width = int(self.operands.gates[index].shape[-1]) - (PAD if layout == "row-strided" else 0)
        return laid_out(layout, width)

    def timed(self):
        shapes = [(2, *shape) for shape in timing_shapes(self.job, int(self.job["width"]))]
        return oracle(self.job["variant"]), lambda gu: self.op(gu[0], gu[1]), shapes

    def stress_input(self, dtype):
        return torch.randn(2, 1, int(self.job["width"])).to(device=self.device, dtype=dtype)


def subject(ctx: ChildContext) -> PairSubject:
    return PairSubject(ctx)
