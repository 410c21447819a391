"""Binds the wrapper's weight to the module's epsilon and its eps to the weight (each of a kind that exists).

why hostile: every binding names real state of the right kind, so only a check of how the wrapper
takes each parameter sees that the weight would arrive as a float.
The kernel and plan below are honest; the contract they come with is not (CONTRACT_CHANGES in
tests/adversarial/adversarial_corpus.py).
"""

# pattern: a binding whose kind does not fit how the wrapper uses the parameter
# layer: contract
# rule: entry-param-kind
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "kernel": "_rms_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)
