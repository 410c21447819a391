"""Where a committed kernel serves: in each lane, only at the row counts where the judge did not time it slower than
eager; everywhere else the module's own forward answers (the reference parity holds the kernel to, so no call is
answered by anything parity has not vouched for). Pure: a function of the run's CandidateJudged and the proposal's
op family, both recorded, so `yantra swaps`, a restart's re-apply and the live swap derive the same plan.

Two lanes, each judged by the figure its calls pay:
- "graph": calls captured in a CUDA graph and replayed (decode steps, small joins; services.server.batch_decode).
  The host launches the graph once, so the judge's GPU time per call decides (`candidate_us` vs `eager_us`). Only a
  kernel the judge captured in a graph itself (the "cuda-graph" capability) serves here; a graph server refuses any
  other (services.server.domain.graph_problem), and on an eager server the lane is never met.
- "eager": calls launched one by one (a prefill too large for a graph, a request decoding alone, every call of a
  server with graphs off, a step whose graph waits to be captured again after a revert). The host waits for each
  launch, so the judge's host-inclusive time decides (`candidate_host_us` vs `eager_host_us`): measured on the H200,
  a Triton launch costs more host time than eager's whole call at some prefill shapes, where the kernel would make a
  graph server's prefill slower (issue 27).

"Not slower" is the judge's margin (FASTER, 5%): within it two times are the same (services.judge.reward), as an
eager server counted them when it refused a kernel slower host-inclusive at any shape (domain.host_problem, the rule
before routing): a kernel it accepted then serves every eager call now. Between two timed row counts the boundary is
their geometric mean (the judge times rows a power of two or more apart: 1, the live shape's, 4096, 32768); below the
first and above the last, the nearest figure holds.

Choices where nothing was measured, and why:
- untimed (judged on a CPU under the Triton interpreter, or on a GPU whose timing could not run) or figures the
  judge's parent did not believe: the kernel serves every call, as before routing. Only a policy that swaps an
  untimed +1 kernel (cpu-untimed) commits one, and that policy is the explicit choice to serve on correctness alone.
- a lane with no row timed in its figure (an eager lane without host-inclusive figures; a graph lane for a kernel the
  judge could not capture): the module's own forward. A kernel claims speed only where it showed it, and the original
  forward is what parity compares with, so it is never a correctness risk to keep it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from services.core.pb import events_pb2 as pb
from services.core.shapes import shape_dims
from services.ops import FAMILIES, physics

GRAPH, EAGER = "graph", "eager"
FASTER = 1.05  # the judge's margin (services.judge.reward.FASTER): within it, two times are the same
CUDA_GRAPH = "cuda-graph"  # the judge's capability (services.judge.reward.capabilities)


@dataclass(frozen=True)
class Lane:
    """One lane's decision: `spans` are (last row count of the span, or None for no end; whether the kernel serves),
    in order, covering every row count from 0."""

    name: str
    spans: tuple[tuple[int | None, bool], ...]
    basis: str  # what decided it, in words

    @property
    def everywhere(self) -> bool:
        return all(kernel for _, kernel in self.spans)

    @property
    def nowhere(self) -> bool:
        return not any(kernel for _, kernel in self.spans)

    def serves(self, rows: int) -> bool:
        """Whether the kernel answers a call of `rows` rows in this lane (a few compares: spans are 1 to 4 long)."""
        for last, kernel in self.spans:
            if last is None or rows <= last:
                return kernel
        return False

    def describe(self) -> str:
        if self.everywhere:
            where = "kernel at every row count"
        elif self.nowhere:
            where = "the module's own forward at every row count"
        else:
            parts, first = [], 0
            for last, kernel in self.spans:
                rows = f"rows {first}+" if last is None else f"rows {first}-{last}"
                parts.append(f"{rows} {'kernel' if kernel else 'own forward'}")
                first = (last or 0) + 1
            where = ", ".join(parts)
        return f"{self.name}: {where} ({self.basis})"


@dataclass(frozen=True)
class ServingPlan:
    graph: Lane
    eager: Lane

    @property
    def everywhere(self) -> bool:
        return self.graph.everywhere and self.eager.everywhere

    def lane(self, graphed: bool) -> Lane:
        return self.graph if graphed else self.eager

    def describe(self, graphs: bool | None = None) -> str:
        """Where it serves, lane by lane; only the eager lane when the server serves without graphs (`graphs`
        False), both when it is not known (None)."""
        lanes = [self.eager] if graphs is False else [self.graph, self.eager]
        return "; ".join(lane.describe() for lane in lanes)


def _lane(name: str, spans: list[tuple[int | None, bool]], basis: str) -> Lane:
    merged: list[tuple[int | None, bool]] = []
    for last, kernel in spans:
        if merged and merged[-1][1] == kernel:
            merged[-1] = (last, kernel)
        else:
            merged.append((last, kernel))
    return Lane(name, tuple(merged), basis)


def everywhere(basis: str) -> ServingPlan:
    return ServingPlan(_lane(GRAPH, [(None, True)], basis), _lane(EAGER, [(None, True)], basis))


def timed_rows(family: str, shape: str) -> int:
    """The rows of a call of the judge's timed `shape` ("AxBxC"), on the scale `call_rows` measures live calls."""
    dims = shape_dims(shape)
    if family not in FAMILIES:  # a plan naming no family (recorded before plans did): rows are the leading dims
        return math.prod(dims[:-1])
    return physics(family).timed_rows(dims)  # the family's timed layout (its judging's)


def _points(rows: list[tuple[int, float, float]]) -> list[tuple[int, bool]]:
    """(row count, not slower) for every row count timed in both figures; two shapes of one row count must both
    be not slower."""
    out: dict[int, bool] = {}
    for n, candidate, eager in rows:
        if candidate > 0 and eager > 0:
            out[n] = out.get(n, True) and candidate <= FASTER * eager
    return sorted(out.items())


def _spans(points: list[tuple[int, bool]]) -> list[tuple[int | None, bool]]:
    spans: list[tuple[int | None, bool]] = []
    for (n, kernel), (after, _) in zip(points, points[1:], strict=False):
        spans.append((math.isqrt(n * after), kernel))  # the geometric mean of two timed row counts
    spans.append((None, points[-1][1]))
    return spans


def _figures(points: list[tuple[int, bool]]) -> str:
    return ", ".join(f"{n} rows {'not slower' if ok else 'slower'}" for n, ok in points)


def plan_for(judged: pb.CandidateJudged | None, family: str) -> ServingPlan:
    """Where the kernel of this verdict serves (module docstring: the lanes, the margin, the choices)."""
    if judged is None:
        return everywhere("no verdict to route by")
    timing = judged.observed.timing
    if not timing.measured or not timing.rows:
        return everywhere("untimed: served wherever its correctness was judged")
    check = judged.observed.timing_check
    if judged.observed.HasField("timing_check") and not check.believed:
        return everywhere("the judge did not believe its figures: served as an untimed kernel")
    try:
        rows = [(timed_rows(family, r.shape), r) for r in timing.rows]
    except ValueError:  # a shape the verdict holds that is none: no figure can be placed
        return everywhere("its timed shapes are unreadable: served as an untimed kernel")
    device = _points([(n, r.candidate_us, r.eager_us) for n, r in rows])
    host = _points([(n, r.candidate_host_us, r.eager_host_us) for n, r in rows])
    if CUDA_GRAPH not in judged.capabilities:
        graph = _lane(GRAPH, [(None, False)], "never captured in a CUDA graph by the judge: own forward")
    elif not device:
        graph = _lane(GRAPH, [(None, False)], "no GPU time measured: own forward")
    else:
        graph = _lane(GRAPH, _spans(device), f"GPU time: {_figures(device)}")
    if not host:
        eager = _lane(EAGER, [(None, False)], "no host-inclusive time measured: own forward")
    else:
        eager = _lane(EAGER, _spans(host), f"host-inclusive: {_figures(host)}")
    return ServingPlan(graph, eager)


def call_rows(kind: str, args: tuple, kwargs: dict) -> int:
    """The rows of a live call, on the judge's scale: a module's first tensor's rows (every dimension but the last:
    a norm's, a layer's hidden states'); a function's (RoPE) the fewest rows of its floating-point tensors (cos and
    sin: one row a position, where q and k have one a head and position)."""
    if kind == "function":
        rows = [t.numel() // t.shape[-1] for t in (*args, *kwargs.values()) if _floating(t) and t.dim() >= 2]
        return min(rows, default=0)
    first = next((t for t in (*args, *kwargs.values()) if hasattr(t, "numel") and hasattr(t, "shape")), None)
    if first is None or not first.dim():
        return 0
    return first.numel() // max(1, first.shape[-1])


def _floating(value) -> bool:
    return getattr(value, "is_floating_point", None) is not None and value.is_floating_point()


def to_lanes(plan: ServingPlan) -> list[pb.ServingLane]:
    """The plan as SwapCommitted records it."""
    return [
        pb.ServingLane(
            lane=lane.name,
            spans=[pb.RowSpan(last_rows=last or 0, kernel=kernel) for last, kernel in lane.spans],
            basis=lane.basis,
        )
        for lane in (plan.graph, plan.eager)
    ]


def from_lanes(lanes) -> ServingPlan | None:
    """The plan a SwapCommitted recorded; None when it recorded none (committed before routing: every call)."""
    by_name = {
        lane.lane: Lane(lane.lane, tuple((s.last_rows or None, s.kernel) for s in lane.spans), lane.basis)
        for lane in lanes
    }
    if GRAPH not in by_name or EAGER not in by_name:
        return None
    return ServingPlan(by_name[GRAPH], by_name[EAGER])
