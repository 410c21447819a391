"""Judging a norm (a module-class target): row cases of the live width and the class's other widths, each with a
weight (and bias) drawn for judging (services.judge.cases), the live class's own forward as the oracle (built here
at each width with the live eps), and in the child the candidate called through its contract on an instance of the
live class holding the case's state, as the server calls it."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from services.judge import live_values
from services.judge.cases import CPU_BOUNDARY_ROWS, CaseSpec, apply_layout, draw_cases
from services.judge.module_factory import (
    build,
    float_binding,
    import_class,
    module_state_attrs,
    torch_dtype,
    width_and_eps,
)
from services.judge.rounding import centred_row_error, honest_bound
from services.judge.subjects import PRODUCTION, timing_shapes
from services.judge.verdict import Reference, checked_reference
from services.ops import row_reduction
from services.ops.protocol import CaseSet, ChildContext, JudgeAsk
from services.ops.recognise_norm import epsilon_of, recognise
from services.ops.row_judging import plan_draws

CPU_BOUNDARY = CPU_BOUNDARY_ROWS


@dataclass(frozen=True)
class Operands:
    bases: list
    weights: list
    biases: list  # empty where the module has no bias
    state_attrs: list  # [weight's attribute, bias's or ""]: the child sets them by the module's own names too
    layouts: list


def references(cases: list, build_module, weight_attr: str, bias_attr: str | None = None) -> list[Reference]:
    """One Reference per case. `build_module(width)` returns a fresh CPU instance of the live class; the case's
    weight (and bias, where the module has one under `bias_attr`) are set on it."""
    out = []
    # width -> (eps, whether it scales by 1 + weight) when the module subtracts the mean (seen running it)
    centred: dict[int, tuple[float, bool] | None] = {}
    for case in cases:
        module = build_module(case.width).to(dtype=case.weight.dtype).eval()
        if case.width not in centred:
            probe = build_module(case.width)
            variant = recognise(probe) or ""
            is_centred = variant.startswith("layernorm")
            centred[case.width] = (epsilon_of(probe), variant == "layernorm_offset") if is_centred else None
        with torch.no_grad():
            getattr(module, weight_attr).copy_(case.weight)
            if case.bias is not None and bias_attr:
                getattr(module, bias_attr).copy_(case.bias)
            x = apply_layout(case.base, case.layout, case.width)
            own = module(x)
            upcast = copy.deepcopy(module).float()
            if centred[case.width] is not None and centred[case.width][1]:
                # LayerNorm1P forms 1 + weight in the weight's dtype: that rounding is the model's, not an error,
                # so the fp32 reference scales by the same 1 + weight (stored less its exact 1)
                served = row_reduction.scale_of("layernorm_offset", getattr(module, weight_attr))
                getattr(upcast, weight_attr).copy_(served.float() - 1.0)
            hi = upcast(x.float()).double()
        bound = honest_bound([x.dtype, case.weight.dtype, own.dtype], reduce_len=case.width, numel=own.numel())
        row_error = None
        if centred[case.width] is not None:
            eps, offset = centred[case.width]
            scale = case.weight.float() + 1.0 if offset else case.weight  # LayerNorm1P's effective weight
            row_error = centred_row_error(x, scale, eps, case.width)
        out.append(checked_reference(case.name, "the module's own output", own, hi, bound, row_error))
    return out


def prepare(ask: JudgeAsk) -> CaseSet:
    target, proposal = ask.target, ask.proposal
    intro = target.introspection
    width, eps = width_and_eps(intro, proposal.contract)
    eps_binding = float_binding(proposal.contract)
    weight_attr, bias_attr = module_state_attrs(intro, proposal.contract)
    attrs = {a.name: a for a in intro.attributes}
    input_dtype = ask.dtype
    param_dtype = attrs[weight_attr].dtype if weight_attr in attrs and attrs[weight_attr].dtype else input_dtype
    spec = CaseSpec(
        width=width,
        live_shape=tuple(target.input_shape) or (1, width),
        input_dtype=torch_dtype(input_dtype),
        param_dtype=torch_dtype(param_dtype),
        gpu=ask.gpu,
        max_rows=0 if ask.gpu else ask.cpu_max_rows,
        examples=ask.examples,
        bias=bias_attr is not None,  # the module's, bound or not: a contract dropping it reads no bias
        widths=target.widths,
        domain_rows=target.max_rows,
        live=live_values.norm_states(target, weight_attr, bias_attr, ask.gpu, ask.seed_base),
        live_sets=target.live_sets,
        **plan_draws(proposal.plan),
    )
    cases = draw_cases(spec, ask.seed_base)
    cls = import_class(intro.class_path)
    eps_attr = eps_binding.attr if eps_binding else None
    refs = references(cases, lambda w: build(cls, w, eps, eps_attr, "cpu"), weight_attr, bias_attr)
    operands = Operands(
        bases=[c.base for c in cases],
        weights=[c.weight for c in cases],
        biases=[c.bias for c in cases] if bias_attr is not None else [],
        state_attrs=[weight_attr, bias_attr or ""],
        layouts=[c.layout for c in cases],
    )
    x, w = spec.input_dtype, spec.param_dtype
    itemsizes = (x.itemsize, w.itemsize, torch.promote_types(x, w).itemsize)
    return CaseSet(cases, refs, operands, width, spec.live_shape, input_dtype, param_dtype, itemsizes, eps, eps_attr)


def oracle(cls, job: dict, width: int, device, seed: int):
    """A real instance of the live class: live dtype, live eps, random weights around 1 (not all ones)."""
    module = build(cls, width, job["eps"], job["eps_attr"], device)
    module = module.to(dtype=torch_dtype(job["param_dtype"])).eval()
    gen = torch.Generator(device="cpu").manual_seed(seed)
    with torch.no_grad():
        for param in module.parameters():
            noise = torch.randn(param.shape, generator=gen).to(device=param.device, dtype=param.dtype)
            param.copy_(1 + 0.1 * noise)
    return module


class NormSubject:
    """The live class's instances hold each case's weight (and bias); the candidate is called through its
    contract, as the server calls it."""

    def __init__(self, ctx: ChildContext):
        from services.core import kernels
        from services.ops import family

        ops = family(ctx.plan.family)
        self.job, self.cls, self.contract, self.device = ctx.job, ctx.target, ctx.contract, ctx.device
        self.operands = ctx.operands
        self.wrapper = ops.make_forward(ctx.plan, ctx.loaded, empty=ctx.empty)
        self.call = kernels.bind(ctx.contract, self.wrapper)
        self.ghost_call = kernels.bind(ctx.contract, ops.make_forward(ctx.plan, ctx.loaded, empty=ctx.empty,
                                                                      launch=False))  # fmt: skip
        # The module's own attributes, as the parent names them (its oracle set the same); the candidate reads
        # whatever its contract binds.
        self.weight_attr, self.bias_attr = ctx.operands.state_attrs
        self.biases = ctx.operands.biases or [None] * len(ctx.operands.bases)
        self.modules: dict = {}
        self.count = len(ctx.operands.bases)

    def _state(self, index: int) -> dict:
        """The case's module tensors by attribute: its weight, and its bias where the module has one."""
        out = {self.weight_attr: self.operands.weights[index]}
        if self.bias_attr and self.biases[index] is not None:
            out[self.bias_attr] = self.biases[index]
        return out

    def _module(self, width: int):
        if width not in self.modules:
            seed = int(self.job["seed_base"]) + width
            self.modules[width] = oracle(self.cls, self.job, width, self.device, seed=seed)
        return self.modules[width]

    def _width(self, index: int) -> int:
        return int(self.operands.weights[index].shape[0])

    def run(self, index: int, guard):
        from services.judge.run_cases import run_case

        width, layout = self._width(index), self.operands.layouts[index]
        view = lambda t: apply_layout(t, layout, width)  # noqa: E731
        return run_case(self.call, self._module(width), self._state(index), self.operands.bases[index], view, guard)

    def again(self, index: int, ghost: bool, when: str = PRODUCTION):
        """Case `index` as production calls it: weight and input in plain memory (the ghost: no launch), the input
        and the weight checked bit for bit after the call."""
        from services.judge.run_cases import run_plain

        width = self._width(index)
        module = self._module(width)
        state = self._state(index)
        with torch.no_grad():
            for attr, value in state.items():
                getattr(module, attr).data = value.to(self.device)
            x = apply_layout(self.operands.bases[index].to(self.device), self.operands.layouts[index], width)
        call = self.ghost_call if ghost else self.call
        watched = [x, *(getattr(module, attr).data for attr in state)]
        return run_plain(lambda: call(module, (x,), {}), watched, when)

    def case_tensors(self, index: int) -> list:
        return [self.operands.bases[index], *self._state(index).values()]

    def timed(self):
        """(the oracle module, the candidate bound to it, the timing shapes)."""
        from services.core import kernels

        width = int(self.job["width"])
        main = oracle(self.cls, self.job, width, self.device, seed=int(self.job["seed_base"]))
        native = row_reduction.native_op(main, width, self.job["eps"])
        if native is not None:  # the timing's native baseline: torch's fused op for what the live class computes
            main.native_op = native
        self.timed_state = [*main.parameters(), *main.buffers()]
        return main, kernels.bound_forward(main, self.wrapper, self.contract), timing_shapes(self.job, width)

    def stress_input(self, dtype):
        return torch.randn(1, int(self.job["width"])).to(device=self.device, dtype=dtype)


def subject(ctx: ChildContext) -> NormSubject:
    return NormSubject(ctx)
