"""A norm's physics, as the profiler ranks it: a reduction over each row (services.profiler.roofline); and the cost
of a row-plan layer rewrite's op inside its layer (the residual norm's, the parallel norm's), counted one way."""

import math
from collections.abc import Callable

from services.core.pb import events_pb2 as pb
from services.ops.protocol import LayerCost

ROOFLINE = "row_reduction"  # the roofline class of a module seen computing one of the family's variants


def timed_rows(dims: tuple[int, ...]) -> int:
    """The rows of a call of the judge's timed shape (services/ops/<family>/judging.py), as a live call counts them."""
    return math.prod(dims[:-1])


def row_layer_cost(
    profile: pb.ModuleClassProfile, hidden: int, elem: int, bytes_moved: Callable, flop_per_element: float
) -> LayerCost:
    """A row-plan layer op's mean call: the layer's mean input bytes as rows of the `hidden` width, `flop_per_element`
    FLOPs an element of them and the bytes `bytes_moved(rows, hidden, elem, elem)` says the fused op moves; the rows
    of the typical call from the recorded input shape (0 when none was recorded)."""
    rows_mean = profile.input_bytes / elem / hidden
    rows = math.prod(int(d) for d in profile.input_shape) // hidden if profile.input_shape else 0
    moved = float(bytes_moved(rows_mean, hidden, elem, elem))
    return LayerCost(ROOFLINE, flop_per_element * rows_mean * hidden, moved, hidden, rows)
