"""Judging a rotary function: (q, k, cos, sin) sets at the live head dim (services.ops.rotary.cases), the live
function itself as the oracle (imported by the judge, run in the live dtype and in float64), the family's op called
on each set in the child, laid out as attention passes them; its two outputs flattened into one tensor by our code
(`cases.flat`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from services.judge import live_values
from services.judge.module_factory import ModuleBuildError, import_function, torch_dtype
from services.judge.subjects import OpSubject
from services.ops import rotary
from services.ops.protocol import CaseSet, ChildContext, JudgeAsk
from services.ops.rotary.cases import (
    CPU_BOUNDARY_POSITIONS,
    RopeSpec,
    draw_rope_cases,
    flat,
    one_tensor_form,
    operands,
    rope_references,
)

CPU_BOUNDARY = CPU_BOUNDARY_POSITIONS  # its plan dispatches by position count, a program a position


@dataclass(frozen=True)
class Operands:
    sets: list  # [q, k, cos, sin] a case
    heads: list  # [q's heads, k's heads] a case
    dims: list  # q's head dim a case (cos's may be a narrower rotary width)
    layouts: list


def prepare(ask: JudgeAsk) -> CaseSet:
    target, proposal = ask.target, ask.proposal
    path = target.introspection.class_path
    _, fn = import_function(path)
    if target.computes not in rotary.VARIANTS:
        raise ModuleBuildError(f"the profile does not say which rotary layout {path} computes")
    live = rotary.heads_major(target.input_shape, target.third_shape)  # q as (batch, heads, seq, head_dim)
    width = int(live[-1]) if live else 0
    rotary_dim = rotary.live_rotary_dim(target.third_shape, width) if live else 0
    one = rotary.one_tensor(proposal.contract)  # the contract check found the function's roles so
    spec = RopeSpec(
        live, torch_dtype(ask.dtype), ask.gpu, examples=max(2, ask.examples // 4), rotary_dim=rotary_dim,
        boundaries=tuple(launch.max_rows for launch in proposal.plan.launches if launch.max_rows),
        one_tensor=one, max_positions=target.max_positions, max_batch=target.max_batch,
        positions_per_program=rotary.positions_per_program(proposal.plan),
        live=live_values.rotaries(target, rotary_dim or width, ask.gpu, ask.seed_base), live_sets=target.live_sets,
    )  # fmt: skip
    cases = draw_rope_cases(spec, target.computes, ask.seed_base)
    refs = rope_references(cases, one_tensor_form(fn, proposal.contract))
    data = Operands(
        sets=[[c.q, c.k, c.cos, c.sin] for c in cases],
        heads=[[c.shape[1], c.heads_k] for c in cases],
        dims=[c.shape[3] for c in cases],
        layouts=[c.layout for c in cases],
    )
    size = torch_dtype(ask.dtype).itemsize
    return CaseSet(cases, refs, data, width, live, ask.dtype, ask.dtype, (size, size, size))


def oracle(fn, heads_q: int, heads_k: int, rotary_dim: int = 0):
    """The live RoPE function as a module of one packed (batch, seq, heads_q + heads_k + 2, head_dim) input — q and
    k heads, then cos and sin — for the timing's baselines (eager, torch.compile) and its replay check: q and k
    unpacked as attention passes them (transposed views), cos and sin as strided views (no copy), the first
    `rotary_dim` of their slots where the rotary width is narrower than the head."""

    def unpack(x):
        q = x[:, :, :heads_q].transpose(1, 2)
        k = x[:, :, heads_q : heads_q + heads_k].transpose(1, 2)
        width = rotary_dim or x.shape[-1]
        return q, k, x[:, :, -2, :width], x[:, :, -1, :width]

    class RopeReference(torch.nn.Module):
        def forward(self, x):
            return fn(*unpack(x))

        @staticmethod
        def bytes_moved(x) -> int:
            b, s, _, d = x.shape
            cos = b * s * (rotary_dim or d)
            return rotary.bytes_moved(b * s * heads_q * d, b * s * heads_k * d, cos, x.element_size())

    return RopeReference().eval(), unpack


class RopeSubject(OpSubject):
    """The family's op called on each case's (q, k, cos, sin); a function of one tensor (Gemma 4's) is called for q
    alone (the cases' k has no heads), and so is the op, as the server's binder calls it: without k."""

    def __init__(self, ctx: ChildContext):
        super().__init__(ctx, len(ctx.operands.sets))
        self.one_tensor = rotary.one_tensor(ctx.contract)
        live_fn = getattr(ctx.target, self.job["class_path"].rsplit(".", 1)[-1])  # the live function: the oracle
        self.fn = one_tensor_form(live_fn, ctx.contract)
        self.raw_op = one_tensor_form(self.op, ctx.contract, ours=True)
        self.raw_ghost = one_tensor_form(self.ghost_op, ctx.contract, ours=True)

    def bases(self, index: int) -> list:
        return list(self.operands.sets[index])

    def view(self, index: int):
        heads, layout = tuple(self.operands.heads[index]), self.operands.layouts[index]
        dim = int(self.operands.dims[index])
        return lambda placed: list(operands(placed, layout, heads, dim))

    def call(self, op, index: int):
        form = self.raw_ghost if op is self.ghost_op else self.raw_op
        return lambda *placed: flat(form(*placed))

    def timed(self):
        live = tuple(int(d) for d in self.job["live_shape"])
        b, hq, s, d = live if len(live) == 4 else (1, 4, 1, int(self.job["width"]))
        # k's live heads (a GQA model has fewer than q), k as (batch, heads, seq, head_dim) whichever order the call
        # passed; as many as q where the profile predates recording them
        second = rotary.heads_major(self.job.get("second_shape") or (), self.job.get("third_shape") or ())
        hk = 0 if self.one_tensor else second[1] if len(second) == 4 else hq
        main, unpack = oracle(self.fn, hq, hk, rotary.live_rotary_dim(self.job.get("third_shape") or (), d))
        by_positions: dict[int, tuple[int, ...]] = {}
        for shape in [(b, s), (1, 1), (1, 4096), (1, 32768)]:
            by_positions.setdefault(shape[0] * shape[1], (*shape, hq + hk + 2, d))
        return main, lambda x: self.raw_op(*unpack(x)), list(by_positions.values())

    def stress_input(self, dtype):
        live = tuple(int(d) for d in self.job["live_shape"])
        hq, d = (live[1], live[3]) if len(live) == 4 else (4, int(self.job["width"]))
        heads = hq + 2 if self.one_tensor else 2 * hq + 2  # q's heads (and as many of k's), cos, sin
        return torch.randn(1, 1, heads, d).to(device=self.device, dtype=dtype)


def subject(ctx: ChildContext) -> RopeSubject:
    return RopeSubject(ctx)
