"""RoPE's physics, as the profiler ranks it: q and k rotated element by element (services.profiler.roofline)."""

import math

ROOFLINE = "elementwise"  # the roofline class of a function seen computing one of the family's variants


def timed_rows(dims: tuple[int, ...]) -> int:
    """The rows of a call of the judge's timed shape: (batch, seq, heads, head_dim) packed, its rows positions."""
    if len(dims) == 4:
        return dims[0] * dims[1]
    return math.prod(dims[:-1])
