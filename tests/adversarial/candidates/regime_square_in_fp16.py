"""Squares the row in fp16 for an fp16 model: fine on unit-scale activations, inf on large ones.

why hostile: x*x in the input dtype saves the upcast; fp16 overflows past 65504, so a row holding
values beyond 256 gets an infinite variance and comes out as zeros. Random normal inputs never show
it; the judge's huge regime (and outlier channels) do.
"""

# pattern: the variance computed in fp16 (overflows on large activations)
# layer: correctness
# rule: outside-tolerance
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "kernel": "_rms_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x16 = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    squares = (x16 * x16).to(tl.float32)  # the product rounds (and overflows) in fp16
    x = x16.to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(squares, axis=0) / n_cols + eps)
    normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)
