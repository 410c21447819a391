"""No kernel at all: a table of constants where the kernel should be, and a plan naming a kernel.

why hostile: with nothing to launch, whatever answers came back would come from somewhere other than
a kernel of this source. A candidate's source must define at least one @triton.jit kernel (and its
plan may launch only those).
"""

# pattern: not Triton: no @triton.jit kernel in the source
# layer: static
# rule: no-jit-kernel
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "kernel": "_rms_kernel", "num_warps": 4}]}

import triton  # noqa: F401
import triton.language as tl  # noqa: F401

SCALE = 1.0
EPS = 1e-6
