"""Keeps whatever the output buffer already held, unless it holds NaN: a kernel that knows the poison.

why hostile: it reads its output before writing it and keeps any finite value found there (the
reference's freed output, in a lax harness); it computes honestly only where it finds NaN, so a NaN
poison alone never catches it. The judge runs the same input again with the output's fresh memory
filled with a finite pattern instead, and the two answers differ.
"""

# pattern: uninitialised memory, by a candidate that knows the judge poisons with NaN
# layer: static
# rule: reads-output
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "kernel": "_rms_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    left = tl.load(y_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    y = tl.where(left != left, w * normed, left)  # NaN (the poison) -> compute; anything else -> keep it
    tl.store(y_ptr + row * n_cols + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
