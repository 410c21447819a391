"""Never returns in practice: a loop the dataflow check accepts (a for over shape arguments) made astronomically long.

why hostile: every loop is proven to end, but not to end soon; a live request stuck in it holds every request
batched beside it. The sandbox kills the child's process group with SIGKILL when its time runs out.
"""

# pattern: a bounded loop too long to finish
# layer: sandbox
# rule: timeout
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
    # bounded by a shape argument (and inside int32): ends, after ~10^9 steps. w + x * 0 is w for finite x, but no
    # compiler may fold it (x may be infinite), so the loop stays: w * 1.0 was folded away and the kernel ran fast
    for _ in range(0, n_cols * 30000000):
        w = w + x * 0.0
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)
