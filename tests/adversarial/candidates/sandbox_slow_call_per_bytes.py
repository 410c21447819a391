"""Correct, but each call takes far longer than its bytes justify: a loop over shape arguments, made enormous.

why hostile: the dataflow check proves every loop ends, not that it ends soon; a live request stuck in one call
holds every request batched beside it. Judged with the sandbox's whole timeout (600 s on CPU), the child's clock
stops the first case at its per-call limit (services.core.call_limits: 20 s for a few kB under the interpreter)
and names the call, its shape and the limit: rejected in seconds, not after the whole timeout.
"""

# pattern: a call far slower than the bytes it moves
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
    # w + x * 0 is w for finite x, and no compiler may fold it (x may be infinite): n_cols * 3 * 10^6 steps a row
    for _ in range(0, n_cols * 3000000):
        w = w + x * 0.0
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)
