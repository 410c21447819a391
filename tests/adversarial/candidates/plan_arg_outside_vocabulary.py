"""Asks the wrapper for a runtime argument outside the family's vocabulary: a workspace that outlives the call.

why hostile: a buffer handed to every call is state a kernel can count calls in (or cache answers in);
the row_reduction family passes only x, w, y, rows, cols, eps and the row strides.
"""

# pattern: a plan argument outside the vocabulary
# layer: static
# rule: launch-plan
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "cols", "eps", "workspace"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "kernel": "_rms_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, ws_ptr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(ws_ptr + row, rstd)
