"""An RMSNorm plan that dispatches at 4,096 rows to a second kernel whose weight load has no mask.

why hostile: below the limit (every decode step, most prefills) an honest masked kernel answers; past it the
second kernel reads past the weight's end wherever the width is under its block, its lanes discarded, so every
answer is right. A GPU judge draws both sides of 4,096 but has no fence there; its fenced pass cannot interpret
4,097 rows either, so it runs the plan with the limit lowered to what it draws: the second kernel then meets the
fence at the odd width. A CPU judge refuses the plan outright (a limit above what it can draw both sides of).
"""

# pattern: a read past a tensor in the launch a plan dispatches to above the interpreter's rows
# layer: sandbox
# rule: memory-fault
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "kernel": "_rms_kernel", "max_rows": "4096", "num_warps": 4}, {"args": ["x", "w", "y", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "kernel": "_rms_unmasked_weight", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    normed = (x * tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rms_unmasked_weight(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols).to(tl.float32)  # no mask: past n_cols it reads beyond the weight
    normed = (x * tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)
