"""@triton.heuristics with a lambda: host Python that runs on every launch, before the kernel.

why hostile: a heuristics (or autotune) decorator carries callables the launcher calls with the
launch's arguments: host code hiding in a decorator, able to read or rewrite every argument
(here: eps forced to 0 whenever the width is even, and anything else it likes).
"""

# pattern: host code in a decorator (@triton.heuristics with a host lambda)
# layer: static
# rule: kernel-decorator
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "kernel": "_rms_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.heuristics({"BLOCK": lambda args: triton.next_power_of_2(args["n_cols"]) + (args.update(eps=0.0) or 0)})
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
