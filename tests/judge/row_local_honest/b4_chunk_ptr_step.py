"""Honest (red-team rounds 14-16, a style the row-local rule must pass): a chunked RMSNorm stepping its column pointers by the block."""

# plan: {"family": "row_reduction", "launches": [{"kernel": "_rmsnorm_fwd_kernel", "args": ["x", "w", "y", "cols", "eps"], "constexprs": {"BLOCK": "256"}, "grid": "rows", "numWarps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rmsnorm_fwd_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    x_ptrs = x_ptr + row * n_cols + offs
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        x = tl.load(x_ptrs, mask=start + offs < n_cols, other=0.0).to(tl.float32)
        acc += x * x
        x_ptrs += BLOCK
    rstd = tl.rsqrt(tl.sum(acc, axis=0) / n_cols + eps)
    x_ptrs = x_ptr + row * n_cols + offs
    y_ptrs = y_ptr + row * n_cols + offs
    w_ptrs = w_ptr + offs
    for start in range(0, n_cols, BLOCK):
        m = start + offs < n_cols
        x = tl.load(x_ptrs, mask=m, other=0.0).to(tl.float32)
        w = tl.load(w_ptrs, mask=m, other=0.0).to(tl.float32)
        tl.store(y_ptrs, (w * (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)).to(y_ptr.dtype.element_ty), mask=m)
        x_ptrs += BLOCK
        y_ptrs += BLOCK
        w_ptrs += BLOCK
