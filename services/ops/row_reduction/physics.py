"""A norm's physics, as the profiler ranks it: a reduction over each row (services.profiler.roofline)."""

import math

ROOFLINE = "row_reduction"  # the roofline class of a module seen computing one of the family's variants


def timed_rows(dims: tuple[int, ...]) -> int:
    """The rows of a call of the judge's timed shape (services/ops/<family>/judging.py), as a live call counts them."""
    return math.prod(dims[:-1])
