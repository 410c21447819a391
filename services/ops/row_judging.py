"""What the judgings of the row-plan families share (the norm's, the residual norm's, the parallel norm's: each plan
is services.ops.row_reduction's row plan): the live rows a layer target is judged at, refused in the judge's words
where the profile does not say them, and what a row plan asks its cases to draw."""

from __future__ import annotations

from collections.abc import Collection

from services.core.pb import events_pb2 as pb
from services.judge.cases import row_blocks
from services.judge.module_factory import ModuleBuildError
from services.ops.protocol import JudgeAsk


def live_rows(ask: JudgeAsk, variants: Collection[str], unsaid: str) -> tuple[tuple[int, ...], int]:
    """(the live input shape, its width) of a layer target the profile saw computing one of `variants`; refused
    (ModuleBuildError) with `unsaid` ("{}" standing for the class path) where it did not, or where it recorded no
    input shape."""
    target = ask.target
    class_path = target.introspection.class_path
    if target.computes not in variants:
        raise ModuleBuildError(unsaid.format(class_path))
    live = tuple(target.input_shape)
    width = int(live[-1]) if live else 0
    if not width:
        raise ModuleBuildError(f"the profile recorded no input shape of {class_path}")
    return live, width


def plan_draws(plan: pb.LaunchPlan) -> dict:
    """What a row plan asks its cases to draw (CaseSpec's and PairSpec's fields of the same names): both sides of
    each of its row dispatch limits, every residue of its rows per program."""
    limits = tuple(launch.max_rows for launch in plan.launches if launch.max_rows)
    return {"boundaries": limits, "row_blocks": row_blocks(plan)}


class EpsilonCase:
    """A drawn case (`drawn`: the norm's row case, the gated pair's case) with the state a layer family adds to it and
    the epsilon its op takes as an argument: named by both, and otherwise what the verdict reports of it
    (services.ops.protocol.DrawnCase) is the drawn case's."""

    eps: float

    @property
    def drawn(self):
        raise NotImplementedError

    @property
    def name(self) -> str:
        return f"{self.drawn.name} eps={self.eps:g}"

    @property
    def width(self) -> int:
        return self.drawn.width

    @property
    def shape(self) -> tuple[int, ...]:
        return self.drawn.shape

    @property
    def regime(self) -> str:
        return self.drawn.regime
