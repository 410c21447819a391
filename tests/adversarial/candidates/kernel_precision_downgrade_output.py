"""Rounds its fp32 answer to bf16 before storing it: half the mantissa bits, the same dtype on paper.

why hostile: the wrapper allocates the module's own dtype now, so the old trick (return a bf16 tensor)
is gone; the same saving survives as a store of bf16-rounded values (an fp32 model served at bf16
precision). A harness that compares after casting both sides to the lower precision passes it.
"""

# pattern: precision downgrade of the output
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
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    y = (w * normed).to(tl.bfloat16)  # the downgrade: bf16 precision in an fp32 output
    tl.store(y_ptr + row * n_cols + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
