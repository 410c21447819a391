"""The gated MLP's physics, as the profiler ranks the layer: act(gate) * up, inside the layer, its time the layer's
outside the projections the rewrite keeps (services.profiler.roofline.layer_op)."""

from __future__ import annotations

import math
from collections.abc import Mapping

from services.core.pb import events_pb2 as pb
from services.ops import gated_mlp
from services.ops.protocol import LayerCost

ROOFLINE = "elementwise"
KEPT = "the projections"  # what the note says the rewrite keeps
FLOP_PER_ELEMENT = 5.0  # the activation (~4 FLOP an element: exp, add, divide, multiply) and the product


def kept_roles(roles: Mapping[str, str]) -> tuple[str, ...]:
    """All its maps, in the family's order (the kept time is a sum: one order, one rounding)."""
    return gated_mlp.FUSED_ROLES if "gate_up_proj" in roles else gated_mlp.ROLES


def shape_roles(roles: Mapping[str, str]) -> tuple[str, ...]:
    return kept_roles(roles)


def layer_cost(profile: pb.ModuleClassProfile, shapes: Mapping[str, tuple[int, ...]], elem: int) -> LayerCost:
    width, hidden = gated_mlp.intermediate_width(shapes), int(shapes["down_proj"][0])
    elements = profile.input_bytes / elem / hidden * width
    rows = math.prod(int(d) for d in profile.input_shape) // hidden if profile.input_shape else 0
    return LayerCost(ROOFLINE, FLOP_PER_ELEMENT * elements, float(gated_mlp.bytes_moved(elements, elem)), width, rows)


def timed_rows(dims: tuple[int, ...]) -> int:
    """The rows of a call of the judge's timed shape: its two operands stacked first, (2, rows..., width)."""
    if len(dims) >= 3:
        dims = dims[1:]
    return math.prod(dims[:-1])
