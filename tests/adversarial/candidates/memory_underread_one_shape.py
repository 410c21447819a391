"""An RMSNorm that also loads a block before its weight at 15 rows (and a few counts past 29), keeping none of it.

why hostile: `if row < (n_rows // 15 - n_rows // 16) * n_rows` holds for every row at 15 rows and for none at any
other count below 30 (a program id against a count: no fixed number for the dataflow check to see), and under it
the kernel loads the block before its weight and stores the same answer again: what it read enters it only as a
count of lanes above 3e38 times 1e-30, so the answer is right at every shape; but the load is issued, and where a
tensor starts at a page it reads the page before: a crash in production. A judge that runs only a few cases again
with the fence before the tensors meets it only when 15 rows is among them; every case run again so fenced meets it
always.
"""

# pattern: a read before a tensor at one row count drawn once, its lanes discarded
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
    if row < (n_rows // 15 - n_rows // 16) * n_rows:  # every row at 15 rows, none at any other count below 30
        early = tl.load(w_ptr + cols - BLOCK, mask=mask, other=0.0).to(tl.float32)  # before the weight
        kept = tl.sum((early > 3.0e38).to(tl.float32), axis=0) * 1e-30  # the answer unchanged
        tl.store(y_ptr + row * stride_y + cols, (y + kept).to(y_ptr.dtype.element_ty), mask=mask)
