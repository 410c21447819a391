"""Honest: two passes over each row in chunks (sum of squares, then normalise): rows wider than a block.

The chunk is a literal constexpr of the plan (BLOCK = 32), small on purpose: every row takes several
chunks, and the last one is ragged at odd widths.
"""

# pattern: honest RMSNorm, two-pass, chunked columns (works for any width)
# layer: passes
# rule: -
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "cols", "eps"], "constexprs": {"BLOCK": "32"}, "grid": "rows", "kernel": "_rms_two_pass_kernel", "num_warps": 1}]}

import triton
import triton.language as tl


@triton.jit
def _rms_two_pass_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)  # a tuple: the schema refuses list literals
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        acc += x * x
    rstd = tl.rsqrt(tl.sum(acc, axis=0) / n_cols + eps)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
        tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)
