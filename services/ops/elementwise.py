"""The launch vocabulary of an elementwise op family: one launch over n elements, N of them a program.

Shared by the families whose op is a pass over contiguous elements (the gated MLP's act(gate) · up, a plain
MLP's activation): the grid `cdiv(n, N)`, integer-literal constexprs, the plan check, and the compiled launch
the family's wrapper calls with its runtime values.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from services.core.pb import events_pb2 as pb
from services.ops.launch import Launcher, launch_options
from services.ops.row_reduction import PlanError, check_one_launch

GRIDS = ("cdiv(n, N)",)
MAX_BLOCK = 1 << 16
_GRID = re.compile(r"^cdiv\(n, (?P<n>\d+)\)$")


def parse_grid(text: str) -> int:
    """Elements per program of a grid in this vocabulary."""
    match = _GRID.match(text)
    if match is None or not 1 <= int(match["n"]) <= MAX_BLOCK:
        raise PlanError(f"grid {text!r} is not one of {', '.join(GRIDS)} (N 1..{MAX_BLOCK})")
    return int(match["n"])


def constexpr_value(name: str, text: str) -> int:
    if re.fullmatch(r"\d{1,6}", text) and int(text) <= MAX_BLOCK:
        return int(text)
    raise PlanError(f"constexpr {name}={text!r} is not an integer literal up to {MAX_BLOCK}")


def check_plan(plan: pb.LaunchPlan, kernels: Mapping, family: str, args: Sequence[str]) -> list[pb.Finding]:
    """Findings (rule `launch-plan`) for a plan of `family` taking runtime `args`; [] when it fits."""
    return check_one_launch(plan, kernels, family, args=tuple(args), grid=parse_grid, value=constexpr_value)


class Launch:
    """A checked plan's one launch, compiled once: `launch(values, n)` runs it over n elements."""

    def __init__(self, plan: pb.LaunchPlan, kernels: Mapping[str, Callable]):
        (only,) = plan.launches
        self.args = tuple(only.args)
        self.launcher = Launcher(kernels[only.kernel], launch_options(only))
        self.per_program = parse_grid(only.grid)
        self.constexprs = {name: constexpr_value(name, text) for name, text in sorted(only.constexprs.items())}

    def __call__(self, values: Mapping[str, object], n: int) -> None:
        self.launcher(-(-n // self.per_program), [values[a] for a in self.args], self.constexprs)
