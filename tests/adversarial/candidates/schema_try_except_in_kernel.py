"""A try/except inside the kernel: under the interpreter the except branch is host Python that runs.

why hostile: the old try/except fallback moved into the kernel body: compiled, Triton refuses it; under
TRITON_INTERPRET=1 (the judge's CPU path) it runs, so the body may do anything the handler likes
when the interpreter raises. Kernel bodies allow only assignments, if/for/while, return and plain
expressions.
"""

# pattern: try/except fallback inside a kernel
# layer: static
# rule: kernel-construct
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
    try:
        rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    except Exception:
        rstd = 1.0
    normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)
