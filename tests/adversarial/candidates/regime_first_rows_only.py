"""Writes only the first LIMIT rows of a call: right for every call up to the live size, unwritten beyond.

why hostile: a kernel tuned (or broken) for the live batch leaves the rows beyond it unwritten; a
judge that checks only the live shape and a few decode rows never calls it with more. The judge
draws calls with more rows than live (and than any 4096-program grid on a GPU: 4099 rows), every
residue of the row blocks, and batched decode. LIMIT is 8 here, the most rows a CPU judge's live
case has (services.judge.service.CPU_MAX_ROWS); on a GPU the same trick at 4096 rows meets the
4099-row case, while under the interpreter no case reaches 4096 rows (the CPU budget is 200 rows).
"""

# pattern: a kernel that writes only the first rows of a call (more rows than live)
# layer: static
# rule: hidden-boundary
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "rows", "cols", "eps"], "constexprs": {"BLOCK": "block_cols", "LIMIT": "8"}, "grid": "rows", "kernel": "_rms_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, n_rows, n_cols, eps, BLOCK: tl.constexpr, LIMIT: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < tl.where(row < LIMIT, n_cols, 0)  # rows past LIMIT: nothing loaded, nothing stored
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)
