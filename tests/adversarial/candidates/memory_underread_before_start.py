"""An honest RMSNorm that also loads the weight one element early, then never uses those lanes.

why hostile: `tl.where(cols < 0, early, w)` keeps the honest weight everywhere, so the answer is right; but lane 0
of every program reads the element before the weight's first, which in production can be the end of the page
before: the server crashes. Guard bytes see writes, not reads, and a fence after the tensor sees only reads past
its end; the judge's CPU places some tensors right after an inaccessible page, so the read faults in the child (on
a GPU judge, in its fenced pass).
"""

# pattern: a load before the start of a tensor, its lanes then discarded by an index condition
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
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    early = tl.load(w_ptr + cols - 1, mask=mask, other=0.0)  # lane 0 reads before the weight's first element
    w = tl.where(cols < 0, early, w)  # never true: the early lanes are discarded
    normed = (x * tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)).to(x_ptr.dtype.element_ty)
    y = w.to(tl.float32) * normed.to(tl.float32)
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
