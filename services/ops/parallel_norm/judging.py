"""Judging a parallel-residual layer's two norms: rows of the live hidden width drawn as the norm family's judge draws
them (services.judge.cases: the live shape, value regimes, batched decode, every residue of the rows per program,
both sides of each row dispatch limit, the class's other widths, odd widths and layouts), each with the first norm's
weight (and bias) from that drawer, a second weight (and bias) of another kind drawn here, and an epsilon; torch's
own norm twice as the oracle (HF's LayerNorm is torch's, its RMSNorm the formula with HF's casts), in the live dtype
and in float64; the family's op called on each case in the child, its two outputs flattened into one tensor."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from services.judge import live_values
from services.judge.cases import (
    CPU_BOUNDARY_ROWS,
    WEIGHTS,
    CaseSpec,
    _bias,
    _generator,
    _weight,
    apply_layout,
    draw_cases,
)
from services.judge.module_factory import torch_dtype
from services.judge.rounding import centred_row_error, honest_bound
from services.judge.subjects import OpSubject, timing_shapes
from services.judge.verdict import Reference, checked_reference
from services.ops import parallel_norm, row_reduction
from services.ops.protocol import CaseSet, ChildContext, JudgeAsk
from services.ops.row_judging import EpsilonCase, live_rows, plan_draws

CPU_BOUNDARY = CPU_BOUNDARY_ROWS  # its plan is the norm family's row plan
EPSILONS = (1e-5, 1e-6)  # the op takes its epsilon as an argument: a kernel must use the one it is given


@dataclass(frozen=True)
class Operands:
    inputs: list
    weights: list
    biases: list  # empty where the norms have no bias
    second_weights: list
    second_biases: list
    epsilons: list
    layouts: list


@dataclass(frozen=True)
class DualCase(EpsilonCase):
    """A norm family's row case (its input, first weight and bias) with the second norm's weight and bias."""

    row: object  # services.judge.cases.Case
    second_weight: torch.Tensor
    second_bias: torch.Tensor | None
    eps: float

    @property
    def drawn(self):
        return self.row


def draw_dual_cases(spec: CaseSpec, seed: int, seconds: tuple = ()) -> list[DualCase]:
    """The norm's row cases, each with a second weight of the kind two along the first's (so the two norms' weights
    always differ in kind: a kernel applying one norm's weight twice is wrong on every case) and an epsilon. The cases
    on the served model's own first norm (`spec.live`) take its second norm's from `seconds` ((weight, bias), in the
    same order)."""
    out, live = [], iter(seconds)
    for i, row in enumerate(draw_cases(spec, seed)):
        g = _generator(seed, "dual-norm-second", i)
        if row.weights == "live":
            weight, bias = next(live)
            weight, bias = weight.to(spec.param_dtype), live_values.live_bias(bias, weight, spec.param_dtype, spec.bias)
        else:
            kind = WEIGHTS[(WEIGHTS.index(row.weights) + 2) % len(WEIGHTS)]
            weight = _weight(kind, row.width, spec.param_dtype, g)
            bias = _bias(row.width, spec.param_dtype, g) if spec.bias else None
        out.append(DualCase(row, weight, bias, EPSILONS[i % len(EPSILONS)]))
    return out


def _exact(inner: str, weight: torch.Tensor) -> torch.Tensor:
    """The weight the float64 reference scales by: the weight itself, or for LayerNorm1P the 1 + weight the model
    forms in the weight's dtype (that rounding is the model's, not an error), stored less its exact 1."""
    if inner == "layernorm_offset":
        return row_reduction.scale_of(inner, weight).double() - 1.0
    return weight.double()


def flat(outputs) -> torch.Tensor:
    """The op's (first, second) as one 1-D tensor, first norm first: what the child writes and the parent compares."""
    first, second = outputs
    return torch.cat([first.reshape(-1), second.reshape(-1)])


def references(cases: list[DualCase], variant: str) -> list[Reference]:
    """One Reference per case: the two norms in the live dtype (`own`, the model's answer today) and in float64
    (`hi`), flattened first norm first; a centred norm's row term on each half, from its own weight."""
    norm = parallel_norm.reference(variant)
    inner = parallel_norm.norm_variant(variant)
    centred = inner.startswith("layernorm")
    out = []
    for case in cases:
        row = case.row
        x = apply_layout(row.base, row.layout, case.width)
        pairs = ((row.weight, row.bias), (case.second_weight, case.second_bias))
        double = lambda t: None if t is None else t.double()  # noqa: E731
        with torch.no_grad():
            own = flat([norm(x, w, b, case.eps) for w, b in pairs])
            hi = flat([norm(x.double(), _exact(inner, w), double(b), case.eps) for w, b in pairs])
        bound = honest_bound([x.dtype, row.weight.dtype, own.dtype], reduce_len=case.width, numel=own.numel())
        term = None
        if centred:  # LayerNorm1P's effective weight is 1 + weight
            scales = [w.float() + 1.0 if inner == "layernorm_offset" else w for w, _ in pairs]
            term = torch.cat([centred_row_error(x, scale, case.eps, case.width).expand(x.shape).reshape(-1)
                              for scale in scales])  # fmt: skip
        out.append(checked_reference(case.name, "torch's own two norms", own, hi, bound, term))
    return out


def prepare(ask: JudgeAsk) -> CaseSet:
    """Its plan is the norm family's row plan: both sides of each row dispatch limit and every residue of its rows
    per program are drawn, as are the class's other hidden widths and, on a GPU, the served row range."""
    target = ask.target
    live, width = live_rows(ask, parallel_norm.VARIANTS, "the profile does not say which two norms {} computes")
    dtype = torch_dtype(ask.dtype)
    biased = parallel_norm.norm_variant(target.computes) in row_reduction.BIASED
    spec = CaseSpec(
        width=width, live_shape=live, input_dtype=dtype, param_dtype=dtype, gpu=ask.gpu,
        max_rows=0 if ask.gpu else ask.cpu_max_rows, examples=ask.examples, bias=biased, widths=target.widths,
        domain_rows=target.max_rows, **plan_draws(ask.proposal.plan),
    )  # fmt: skip
    # the served model's own two norms, by role (services.ops.parallel_norm.live_state): sets holding both weights
    firsts = live_values.norm_states(target, "input_norm.weight", "input_norm.bias", ask.gpu, ask.seed_base)
    seconds = live_values.norm_states(target, "post_norm.weight", "post_norm.bias", ask.gpu, ask.seed_base)
    both = {first[0] for first in firsts} & {second[0] for second in seconds}
    spec = dataclasses.replace(spec, live=tuple(s for s in firsts if s[0] in both), live_sets=target.live_sets)
    cases = draw_dual_cases(spec, ask.seed_base, tuple((w, b) for i, w, b, _ in seconds if i in both))
    operands = Operands(
        inputs=[c.row.base for c in cases],
        weights=[c.row.weight for c in cases],
        biases=[c.row.bias for c in cases] if biased else [],
        second_weights=[c.second_weight for c in cases],
        second_biases=[c.second_bias for c in cases] if biased else [],
        epsilons=[c.eps for c in cases],
        layouts=[c.row.layout for c in cases],
    )
    size = dtype.itemsize
    return CaseSet(cases, references(cases, target.computes), operands, width, spec.live_shape, ask.dtype, ask.dtype,
                   (size, size, size))  # fmt: skip


def oracle(variant: str, width: int, device, dtype, seed: int):
    """The layer's two norms as a module of its hidden state, with weights (and biases) drawn around their init: the
    timing's eager and torch.compile baselines and its replay check. Its native baseline is torch's fused norm called
    twice (torch has no fused pair); it counts the bytes the fused op must move."""
    norm = parallel_norm.reference(variant)
    gen = torch.Generator().manual_seed(seed)
    draw = lambda scale, around: (around + scale * torch.randn(width, generator=gen)).to(device=device, dtype=dtype)  # noqa: E731
    inner = parallel_norm.norm_variant(variant)
    biased = inner in row_reduction.BIASED
    w1, w2 = draw(0.1, 1.0), draw(0.1, 1.0)
    b1, b2 = (draw(0.1, 0.0), draw(0.1, 0.0)) if biased else (None, None)
    eps = EPSILONS[0]
    F = torch.nn.functional
    s1, s2 = row_reduction.scale_of(inner, w1), row_reduction.scale_of(inner, w2)  # what torch's norm is given

    class DualNormReference(torch.nn.Module):
        def forward(self, x):
            return norm(x, w1, b1, eps), norm(x, w2, b2, eps)

        @staticmethod
        def native_op(x):
            if inner.startswith("layernorm"):
                return F.layer_norm(x, (width,), s1, b1, eps), F.layer_norm(x, (width,), s2, b2, eps)
            return F.rms_norm(x, (width,), s1, eps), F.rms_norm(x, (width,), s2, eps)

        @staticmethod
        def bytes_moved(x) -> int:
            return parallel_norm.bytes_moved(x.numel() // width, width, x.element_size(), w1.element_size())

    return DualNormReference().eval(), (w1, b1, w2, b2), eps


class DualNormSubject(OpSubject):
    """The family's op called on each case's input with both norms' weights, biases and the epsilon."""

    def __init__(self, ctx: ChildContext):
        super().__init__(ctx, len(ctx.operands.inputs))

    def bases(self, index: int) -> list:
        o = self.operands
        if o.biases:
            return [o.inputs[index], o.weights[index], o.biases[index], o.second_weights[index], o.second_biases[index]]
        return [o.inputs[index], o.weights[index], o.second_weights[index]]

    def view(self, index: int):
        layout = self.operands.layouts[index]
        width = int(self.operands.weights[index].shape[0])
        # only the input is laid out: the weights and biases are 1-D
        return lambda placed: [apply_layout(placed[0], layout, width), *placed[1:]]

    def call(self, op, index: int):
        eps = float(self.operands.epsilons[index])
        if self.operands.biases:
            return lambda x, w1, b1, w2, b2: flat(op(x, w1, b1, w2, b2, eps))
        return lambda x, w1, w2: flat(op(x, w1, None, w2, None, eps))

    def inputs(self, operands: list) -> int:
        return 1  # the weights (and biases) after the input

    def timed(self):
        width = int(self.job["width"])
        dtype = torch_dtype(self.job["input_dtype"])
        main, state, eps = oracle(self.job["variant"], width, self.device, dtype, int(self.job["seed_base"]))
        self.timed_state = [t for t in state if t is not None]
        return main, lambda x: self.op(x, *state, eps), timing_shapes(self.job, width)

    def stress_input(self, dtype):
        return torch.randn(1, int(self.job["width"])).to(device=self.device, dtype=dtype)


def subject(ctx: ChildContext) -> DualNormSubject:
    return DualNormSubject(ctx)
