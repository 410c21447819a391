"""The residual norm's physics, as the profiler ranks the decoder layer: the add and a norm's ~4 FLOP an element,
over rows of the hidden width, its time the layer's outside the children the rewrite keeps
(services.profiler.roofline.layer_op)."""

from __future__ import annotations

import math
from collections.abc import Mapping

from services.core.pb import events_pb2 as pb
from services.ops import residual_norm
from services.ops.protocol import LayerCost
from services.ops.row_reduction.physics import row_layer_cost

ROOFLINE = "row_reduction"
KEPT = "the norm, attention and MLP"
KEPT_ROLES = ("input_norm", "attention", "mlp")  # the post norm is the rewrite's own
FLOP_PER_ELEMENT = 5.0


def kept_roles(roles: Mapping[str, str]) -> tuple[str, ...]:
    return KEPT_ROLES


def shape_roles(roles: Mapping[str, str]) -> tuple[str, ...]:
    return residual_norm.ROLES


def layer_cost(profile: pb.ModuleClassProfile, shapes: Mapping[str, tuple[int, ...]], elem: int) -> LayerCost:
    hidden = int(shapes["post_norm"][0])
    return row_layer_cost(profile, hidden, elem, residual_norm.bytes_moved, FLOP_PER_ELEMENT)


def timed_rows(dims: tuple[int, ...]) -> int:
    """The rows of a call of the judge's timed shape: its two operands stacked first, (2, rows..., width)."""
    if len(dims) >= 3:
        dims = dims[1:]
    return math.prod(dims[:-1])
