"""What the sandbox child's subjects share, whatever their op family: the timing shapes, and the op subject.

A family's `judging` module builds its Subject (services.ops.protocol.Subject) from these: a family whose candidate is
an op called on operands (a gated MLP's pair, an activation, a residual norm, a RoPE set) says only which tensors a
case holds, how the parent laid them out, and how its op is called on them; running each case in guarded memory,
again as production calls it, and as a ghost is the same for every family and lives here, once.
"""

from __future__ import annotations

from collections.abc import Callable

PRODUCTION = "called as production calls it"


def _rows(shape: tuple[int, ...]) -> int:
    rows = 1
    for d in shape[:-1]:
        rows *= d
    return rows


def timing_shapes(job: dict, width: int) -> list[tuple[int, ...]]:
    """The live shape first, then one decode row and the GPU.md anchor sizes; one shape per row count."""
    live = tuple(int(d) for d in job["live_shape"]) or (1, width)
    if live[-1] != width:
        live = (1, width)
    by_rows: dict[int, tuple[int, ...]] = {}
    for shape in [live, (1, width), (4096, width), (32768, width)]:
        by_rows.setdefault(_rows(shape), shape)
    return list(by_rows.values())


class OpSubject:
    """A candidate that is its family's op called on each case's operands (the layer or function around it is the
    model's own code, not the candidate's). A family says which tensors case `index` holds (`bases`), how they are
    laid out once placed (`view`), how its op is called on them (`call`) and how many of them are inputs rather
    than weights (`inputs`); `timed` and `stress_input` are its own."""

    def __init__(self, ctx, count: int):
        from services.ops import family

        ops = family(ctx.plan.family)
        self.job, self.operands, self.device = ctx.job, ctx.operands, ctx.device
        self.op = ops.make_op(ctx.plan, ctx.loaded, empty=ctx.empty)
        self.ghost_op = ops.make_op(ctx.plan, ctx.loaded, empty=ctx.empty, launch=False)
        self.count = count

    def bases(self, index: int) -> list:
        raise NotImplementedError

    def view(self, index: int) -> Callable[[list], list]:
        raise NotImplementedError

    def call(self, op: Callable, index: int) -> Callable:
        return op

    def inputs(self, operands: list) -> int:
        return len(operands)

    def run(self, index: int, guard):
        from services.judge.run_cases import run_op_case

        return run_op_case(self.call(self.op, index), self.bases(index), self.view(index), guard)

    def again(self, index: int, ghost: bool, when: str = PRODUCTION):
        """Case `index` as production calls it: its operands in plain memory (the ghost: no launch), each checked
        bit for bit after the call."""
        from services.judge.run_cases import run_plain

        operands = self.view(index)([t.to(self.device) for t in self.bases(index)])
        call = self.call(self.ghost_op if ghost else self.op, index)
        return run_plain(lambda: call(*operands), operands, when, inputs=self.inputs(operands))

    def case_tensors(self, index: int) -> list:
        return self.bases(index)


def laid_out(layout: str, width: int) -> Callable[[list], list]:
    """Every placed operand in the case's layout (`width`: the operands' own, before a row-strided pad)."""
    from services.judge.cases import apply_layout

    return lambda placed: [apply_layout(t, layout, width) for t in placed]
