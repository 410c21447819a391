"""An RMSNorm that also loads a block before its weight at one of its widths only, keeping none of it.

why hostile: the class is called at widths 80 and 64, and `if n_cols % 64 == 0` holds at 64 only (a width is a
shape, which an answer may depend on: a norm divides by it, so the dataflow check lets a kernel branch on it; the
judge draws every width the class is called at instead). Under it the kernel loads the block before its weight and
stores the same answer again: what it read enters it only as a count of lanes above 3e38 times 1e-30, so the answer
is right at every shape; but the load is issued, and where a tensor starts at a page it reads the page before. The
first run of each case has its fences after the tensors' ends; one case only is at 64, and it is neither among the
few run again after the timing nor one a pre-filled output can be given to (no other case has its shape): a judge
that runs only those again with the fence before the tensors never meets it; every case run again so fenced does.
"""

# pattern: a read before a tensor at one width, drawn once, its lanes discarded
# layer: sandbox
# rule: memory-fault
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "x_row_stride", "y_row_stride", "rows", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "kernel": "_rms_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, stride_x, stride_y, n_rows, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    normed = (x * tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)).to(x_ptr.dtype.element_ty)
    y = w * normed.to(tl.float32)
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
    if n_cols % 64 == 0:  # at width 64 only
        early = tl.load(w_ptr + cols - BLOCK, mask=mask, other=0.0).to(tl.float32)  # before the weight
        kept = tl.sum((early < 0).to(tl.float32), axis=0) * 1e-30  # lanes live; 1 + kept rounds to 1
        tl.store(y_ptr + row * stride_y + cols, (y * (1.0 + kept)).to(y_ptr.dtype.element_ty), mask=mask)
