"""An RMSNorm that also loads a block before its weight at 15 rows (and a few counts past 29), keeping none of it.

why hostile: the extra load's offset steps back a block with `n_rows // 15 - n_rows // 16`, which is 1 at 15 rows
and 0 at every other count below 30, and its lanes enter the answer only as a count of lanes above 3e38 times
1e-30, through a sum (a compiler cannot prove them dead lane by lane, so the load is issued; a NaN read there counts
nothing), so the answer is right at every shape; but the load is live, and where a tensor starts at a page it reads
the page before: a crash in production. A judge that runs only a few cases again with the fence before the tensors
meets it only when 15 rows is among them; every case run again so fenced meets it always.
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
    back = (n_rows // 15 - n_rows // 16) * BLOCK  # a block back at 15 rows, none at any other count below 30
    early = tl.load(w_ptr + cols - back, mask=cols - back < n_cols, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    kept = tl.sum((early > 3.0e38).to(tl.float32), axis=0) * 1e-30  # every early lane live; the answer unchanged
    normed = (x * tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)).to(x_ptr.dtype.element_ty)
    y = (w + kept) * normed.to(tl.float32)
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
