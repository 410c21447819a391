"""A wrong RMSNorm: it forgets to multiply by the weight. The server must reject and revert it."""

# plan: {"family": "row_reduction", "launches": [{"args": ["x", "y", "x_row_stride", "y_row_stride", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "kernel": "_rmsnorm_no_weight_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rmsnorm_no_weight_kernel(x_ptr, y_ptr, stride_x, stride_y, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    variance = tl.sum(x * x, axis=0) / n_cols
    y = x * (1.0 / tl.sqrt(variance + eps))
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
