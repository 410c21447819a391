"""An RMSNorm that also loads a block before its weight from 4,097 rows on, and keeps none of it: a read before a tensor.

why hostile: a loop over `range(1, tl.cdiv(n_rows, 4097))` (a tile count: a bound the dataflow check allows) runs
no iteration at any row count a CPU runs whole, and one from 4,097 rows on, where it loads the block before the
weight.
What it read enters the answer only as a count of lanes above 3e38 times 1e-30, so the answer stays right and the
load is issued (a compiler cannot prove its lanes dead); at a long prefill it reads memory before the weight, which
in production can be an unmapped page. A GPU judging runs its large cases first with fences after the tensors (the
read lands in the zeroed rest of the tensor's mapping, unseen), so only running every case again with the fences
before the tensors' starts meets it. A CPU judging meets it the same way at the served maximum, where it runs a
sample of the launch's programs (services.judge.sampled_grid), each of which runs the loop.
"""

# pattern: a read before a tensor only at row counts a CPU never runs whole, its lanes discarded
# layer: static
# rule: row-local
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
    for t in range(1, tl.cdiv(n_rows, 4097)):  # no iteration below 4,097 rows
        early = tl.load(w_ptr + cols - t * BLOCK, mask=mask, other=0.0).to(tl.float32)  # before the weight
        kept = tl.sum((early < 0).to(tl.float32), axis=0) * 1e-30  # lanes live; 1 + kept rounds to 1
        tl.store(y_ptr + row * stride_y + cols, (y * (1.0 + kept)).to(y_ptr.dtype.element_ty), mask=mask)
