"""Never returns: a loop inside the kernel whose counter never moves.

why hostile: a judge without a time limit (or one that waits politely) stops judging altogether.
No schema can decide whether a loop ends (while loops are legitimate kernel code); the sandbox kills
the child's process group with SIGKILL when its time runs out.
"""

# pattern: an infinite loop
# layer: static
# rule: unbounded-loop
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "rows", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "kernel": "_rms_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, n_rows, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    spin = 0
    while spin < n_rows:  # spin never grows
        spin = spin * 1
        w = w * 1.0
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)
