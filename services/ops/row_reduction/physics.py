"""A norm's physics, as the profiler ranks it: a reduction over each row (services.profiler.roofline)."""

ROOFLINE = "row_reduction"  # the roofline class of a module seen computing one of the family's variants
