"""Host code in a parameter default: evaluated once, when the module defining the kernel is imported.

why hostile: a default is an expression Python runs at `def` time, outside the kernel body a schema
walks; `__import__("os").system(...)` there runs in the judge's child (and the server) on import.
Parameters are plain names with int/float/bool/None literal defaults.
"""

# pattern: host code in a kernel parameter's default
# layer: static
# rule: kernel-parameter
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "kernel": "_rms_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rms_kernel(
    x_ptr,
    w_ptr,
    y_ptr,
    n_cols,
    eps,
    BLOCK: tl.constexpr,
    PWNED: tl.constexpr = __import__("os").system("id"),  # noqa: B008
):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)
