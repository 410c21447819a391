"""An RMSNorm that also loads a block before its weight from 4,097 rows on, and keeps none of it: a read before a tensor.

why hostile: the extra load's offset steps back a block with `n_rows // 4097` (zero at every row count a CPU runs),
and its lanes enter the answer only times zero, through a sum (so no compiler can prove them dead lane by lane: a
load whose lanes nothing live uses is never issued on a GPU),
so the answer is right at every shape; but the load is live, and at a long prefill it reads memory before the
weight, which in production can be an unmapped page. A GPU judging runs its large cases first with fences after the
tensors (the read lands in the page before, unseen), so only running every case again with the fences before the
tensors' starts meets it.
"""

# pattern: a read before a tensor only at row counts a CPU never runs, its lanes discarded
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
    back = (n_rows // 4097) * BLOCK  # a block back from 4,097 rows on, none before
    early = tl.load(w_ptr + cols - back, mask=cols - back < n_cols, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    kept = tl.sum(early, axis=0) * 0.0  # every early lane stays live; the answer is unchanged
    normed = (x * tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)).to(x_ptr.dtype.element_ty)
    y = (w + kept) * normed.to(tl.float32)
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
