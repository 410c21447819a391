"""Reads its output buffer and keeps what is there when it already looks like an answer.

why hostile: the caching allocator hands a freed output back, so the second call with the same input returns the
first call's answer without computing — and a stale one when the input changed but the buffer still looks right.
The dataflow check refuses any load from an output the family does not declare in-place.
"""

# pattern: the output buffer read as a cache
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
    old = tl.load(y_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    fresh = (w * normed).to(y_ptr.dtype.element_ty)
    tl.store(y_ptr + row * n_cols + cols, fresh + (old * 0.0).to(y_ptr.dtype.element_ty), mask=mask)
