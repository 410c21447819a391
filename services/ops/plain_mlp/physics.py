"""A plain MLP's physics, as the profiler ranks the layer: the activation alone, over the intermediate width, its
time the layer's outside the maps the rewrite keeps (services.profiler.roofline.layer_op)."""

from __future__ import annotations

import math
from collections.abc import Mapping

from services.core.pb import events_pb2 as pb
from services.ops import plain_mlp
from services.ops.protocol import LayerCost

ROOFLINE = "elementwise"
KEPT = "the projections"
FLOP_PER_ELEMENT = 5.0  # counted as the gated MLP's activation and product are (the ranking's one rule)


def kept_roles(roles: Mapping[str, str]) -> tuple[str, ...]:
    return plain_mlp.ROLES


def shape_roles(roles: Mapping[str, str]) -> tuple[str, ...]:
    return plain_mlp.ROLES


def layer_cost(profile: pb.ModuleClassProfile, shapes: Mapping[str, tuple[int, ...]], elem: int) -> LayerCost | None:
    hidden = int(profile.input_shape[-1]) if profile.input_shape else 0
    if not hidden:
        return None
    width = plain_mlp.intermediate_width(shapes, hidden)
    elements = profile.input_bytes / elem / hidden * width
    rows = math.prod(int(d) for d in profile.input_shape) // hidden
    return LayerCost(ROOFLINE, FLOP_PER_ELEMENT * elements, float(plain_mlp.bytes_moved(elements, elem)), width, rows)


def timed_rows(dims: tuple[int, ...]) -> int:
    """The rows of a call of the judge's timed shape (services/ops/<family>/judging.py), as a live call counts them."""
    return math.prod(dims[:-1])
