"""An honest RMSNorm that also loads 64 widths past the weight's start, then never uses those lanes.

why hostile: `tl.where(cols < 0, far, w)` keeps the honest weight everywhere, so the answer is right; but every
program reads memory tens of kilobytes past the weight's end (an offset built from shapes alone, as the dataflow
check allows), which in production is whatever lies there, or no mapping at all: the server crashes. A fence of one
page after the tensor would not reach that far; the judge's CPU places 8 MiB of inaccessible memory on each side of
every tensor, so the read faults in the child (on a GPU judge, in its fenced pass).
"""

# pattern: a load far outside a tensor (shapes times a constant), its lanes then discarded by an index condition
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
    far = tl.load(w_ptr + n_cols * 64 + cols, mask=mask, other=0.0)  # 64 widths past the weight's start
    w = tl.where(cols < 0, far, w)  # never true: the far lanes are discarded
    normed = (x * tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)).to(x_ptr.dtype.element_ty)
    y = w.to(tl.float32) * normed.to(tl.float32)
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
