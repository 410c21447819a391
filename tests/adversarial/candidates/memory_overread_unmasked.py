"""An honest RMSNorm whose weight is loaded with no mask: past a row's width it reads what follows the weight.

why hostile: the lanes past the width are never stored, so the answer is right wherever the read itself
succeeds; on a width under the block (the odd width) it reads past the weight's end, which in production can
be the end of a page: the server crashes. Guard bytes see writes, not reads; the judge's CPU places every
tensor against an inaccessible page, so the read faults in the child.
"""

# pattern: a load with no mask, past the end of a tensor, its lanes then discarded
# layer: sandbox
# rule: memory-fault
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "x_row_stride", "y_row_stride", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "kernel": "_rms_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, stride_x, stride_y, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols)  # no mask: past n_cols it reads beyond the weight
    normed = (x * tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)).to(x_ptr.dtype.element_ty)
    y = w.to(tl.float32) * normed.to(tl.float32)
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
