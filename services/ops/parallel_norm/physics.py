"""The parallel norm's physics, as the profiler ranks the layer: one row reduction and two scalings of it over rows
of the hidden width (~7 FLOP an element: a norm's reduction and centring once, a weight and a bias twice), its time
the layer's outside the attention and MLP the rewrite keeps (services.profiler.roofline.layer_op): both norms are
the rewrite's own."""

from __future__ import annotations

import math
from collections.abc import Mapping

from services.core.pb import events_pb2 as pb
from services.ops import parallel_norm
from services.ops.protocol import LayerCost
from services.ops.row_reduction.physics import row_layer_cost

ROOFLINE = "row_reduction"
KEPT = "the attention and MLP"
KEPT_ROLES = ("attention", "mlp")
SHAPE_ROLES = ("input_norm", "post_norm")  # the children whose weight shapes the cost reads
FLOP_PER_ELEMENT = 7.0


def kept_roles(roles: Mapping[str, str]) -> tuple[str, ...]:
    return KEPT_ROLES


def shape_roles(roles: Mapping[str, str]) -> tuple[str, ...]:
    return SHAPE_ROLES


def layer_cost(profile: pb.ModuleClassProfile, shapes: Mapping[str, tuple[int, ...]], elem: int) -> LayerCost:
    hidden = int(shapes["input_norm"][0])
    return row_layer_cost(profile, hidden, elem, parallel_norm.bytes_moved, FLOP_PER_ELEMENT)


def timed_rows(dims: tuple[int, ...]) -> int:
    """The rows of a call of the judge's timed shape (rows..., width): the hidden state's rows, as the server
    counts a live call's."""
    return math.prod(dims[:-1])
