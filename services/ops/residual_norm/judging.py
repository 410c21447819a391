"""Judging a decoder layer's residual norm: (attention output, residual) pairs of the live hidden width with the
norm's weight (and bias) and an epsilon per case (services.ops.residual_norm.cases), torch's add then the post
norm's formula as the oracle (the variant the server saw the layer compute), the family's op called on each in the
child; its two outputs flattened into one tensor by our code (`cases.flat`). The layer around it is the model's
own code."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from services.judge import live_values
from services.judge.cases import CPU_BOUNDARY_ROWS, PAD, apply_layout
from services.judge.module_factory import torch_dtype
from services.judge.pair_cases import PairSpec
from services.judge.rounding import centred_row_error, honest_bound
from services.judge.subjects import OpSubject, timing_shapes
from services.judge.verdict import Reference, checked_reference, exact_as_served
from services.ops import residual_norm, row_reduction
from services.ops.protocol import CaseSet, ChildContext, JudgeAsk
from services.ops.residual_norm.cases import draw_add_norm_cases, flat
from services.ops.row_judging import live_rows, plan_draws

CPU_BOUNDARY = CPU_BOUNDARY_ROWS  # its plan is the norm family's row plan


@dataclass(frozen=True)
class Operands:
    actives: list
    residuals: list
    weights: list
    biases: list  # empty where the norm has no bias
    epsilons: list
    layouts: list


def references(cases: list, variant: str) -> list[Reference]:
    """One Reference per case: torch's add then the post norm's formula (`own`, HF's casts in the live dtype), and
    in float64 (`hi`: the sum exact, rounded only where it overflows; the norm of the sum as served, since the layer
    rounds it to the dtype before normalising). Both outputs flattened, normed first; a centred norm's row term on
    the normed part."""
    fn = residual_norm.reference(variant)
    inner = residual_norm.norm_variant(variant)
    centred = inner.startswith("layernorm")
    offset = inner == "layernorm_offset"
    out = []
    for case in cases:
        a = apply_layout(case.pair.gate, case.layout, case.width)
        x = apply_layout(case.pair.up, case.layout, case.width)
        b = case.bias
        with torch.no_grad():
            own_y, own_s = fn(a, x, case.weight, case.eps, b)
            served = own_s.double()
            # LayerNorm1P's 1 + weight is formed in the weight's dtype: that rounding is the model's, so the float64
            # reference scales by the same (stored less its exact 1)
            w_hi = row_reduction.scale_of(inner, case.weight).double() - 1.0 if offset else case.weight.double()
            hi_y, _ = fn(torch.zeros_like(served), served, w_hi, case.eps, None if b is None else b.double())
            hi_s = exact_as_served(x.double() + a.double(), own_s.dtype)
        own, hi = flat((own_y, own_s)), flat((hi_y, hi_s))
        bound = honest_bound([a.dtype, case.weight.dtype, own_y.dtype], reduce_len=case.width, numel=own.numel())
        term = None
        if centred:
            scale = case.weight.float() + 1.0 if offset else case.weight
            rows = centred_row_error(own_s, scale, case.eps, case.width).expand_as(own_y)
            term = torch.cat([rows.reshape(-1), torch.zeros(own_s.numel(), dtype=rows.dtype)])
        out.append(checked_reference(case.name, "torch's own add and norm", own, hi, bound, term))
    return out


def prepare(ask: JudgeAsk) -> CaseSet:
    """Its plan is the norm family's row plan: both sides of each row dispatch limit and every residue of its rows
    per program are drawn, as are the class's other hidden widths and, on a GPU, the served row range."""
    target = ask.target
    live, width = live_rows(
        ask, residual_norm.VARIANTS, "the profile does not say which norm {} computes after its add"
    )
    spec = PairSpec(
        width, live, torch_dtype(ask.dtype), ask.gpu, (), examples=ask.examples // 2, widths=target.widths,
        domain_rows=target.max_rows, **plan_draws(ask.proposal.plan),
    )  # fmt: skip
    bias = residual_norm.norm_variant(target.computes) in row_reduction.BIASED
    states = live_values.norm_states(target, "weight", "bias" if bias else None, ask.gpu, ask.seed_base)
    cases = draw_add_norm_cases(spec, ask.seed_base, bias, states, target.live_sets)
    operands = Operands(
        actives=[c.pair.gate for c in cases],
        residuals=[c.pair.up for c in cases],
        weights=[c.weight for c in cases],
        biases=[c.bias for c in cases] if bias else [],
        epsilons=[c.eps for c in cases],
        layouts=[c.layout for c in cases],
    )
    size = torch_dtype(ask.dtype).itemsize
    return CaseSet(cases, references(cases, target.computes), operands, width, live, ask.dtype, ask.dtype,
                   (size, size, size))  # fmt: skip


def oracle(variant: str, width: int, device, dtype, seed: int):
    """torch's add and the post norm as a module of one stacked (2, ..., width) input (the attention output, the
    residual), with a weight (and bias) drawn around the module's init: the timing's eager and torch.compile
    baselines and its replay check. Its native baseline is torch's add then its fused norm (torch has no fused
    add-and-norm); it counts the bytes the fused op must move."""
    fn = residual_norm.reference(variant)
    inner = residual_norm.norm_variant(variant)
    gen = torch.Generator().manual_seed(seed)
    weight = (1 + 0.1 * torch.randn(width, generator=gen)).to(device=device, dtype=dtype)
    biased = inner in row_reduction.BIASED
    bias = (0.1 * torch.randn(width, generator=gen)).to(device=device, dtype=dtype) if biased else None
    eps = 1e-6
    F = torch.nn.functional

    class AddNormReference(torch.nn.Module):
        def forward(self, ax):
            return fn(ax[0], ax[1], weight, eps, bias)

        @staticmethod
        def native_op(ax):
            s = ax[1] + ax[0]
            scale = row_reduction.scale_of(inner, weight)
            if inner.startswith("layernorm"):
                return F.layer_norm(s, (width,), scale, bias, eps), s
            return F.rms_norm(s, (width,), scale, eps), s

        @staticmethod
        def bytes_moved(ax) -> int:
            return residual_norm.bytes_moved(ax[0].numel() // width, width, ax.element_size(), weight.element_size())

    return AddNormReference().eval(), weight, bias, eps


class AddNormSubject(OpSubject):
    """The family's op called on each case's (attention output, residual) with its weight, bias and epsilon."""

    def __init__(self, ctx: ChildContext):
        super().__init__(ctx, len(ctx.operands.actives))

    def bases(self, index: int) -> list:
        o = self.operands
        extra = [o.biases[index]] if o.biases else []
        return [o.actives[index], o.residuals[index], o.weights[index], *extra]

    def view(self, index: int):
        layout = self.operands.layouts[index]
        width = int(self.operands.weights[index].shape[0])
        padded = width + (PAD if layout == "row-strided" else 0)
        return lambda placed: [apply_layout(t, layout, width) if t.shape[-1] == padded and t.dim() > 1 else t
                               for t in placed]  # fmt: skip

    def call(self, op, index: int):
        eps = float(self.operands.epsilons[index])
        return lambda a, x, w, b=None: flat(op(a, x, w, eps, b))

    def inputs(self, operands: list) -> int:
        return 2  # the weight (and bias) after the pair

    def timed(self):
        width = int(self.job["width"])
        dtype = torch_dtype(self.job["input_dtype"])
        main, weight, bias, eps = oracle(self.job["variant"], width, self.device, dtype, int(self.job["seed_base"]))
        shapes = [(2, *shape) for shape in timing_shapes(self.job, width)]
        self.timed_state = [weight] if bias is None else [weight, bias]
        return main, lambda ax: self.op(ax[0], ax[1], weight, eps, bias), shapes

    def stress_input(self, dtype):
        return torch.randn(2, 1, int(self.job["width"])).to(device=self.device, dtype=dtype)


def subject(ctx: ChildContext) -> AddNormSubject:
    return AddNormSubject(ctx)
