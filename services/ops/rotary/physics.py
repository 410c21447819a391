"""RoPE's physics, as the profiler ranks it: q and k rotated element by element (services.profiler.roofline)."""

ROOFLINE = "elementwise"  # the roofline class of a function seen computing one of the family's variants
