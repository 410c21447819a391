"""Turns a pointer into an integer: under the interpreter, a raw address of the process.

why hostile: `int()` of a pointer under TRITON_INTERPRET=1 is the numpy buffer's address; with it a kernel can read
or write anywhere in the child — and in a CPU server, the server's memory. The dataflow check refuses any use of a
pointer but offsetting, loading and storing.
"""

# pattern: a pointer cast to an integer
# layer: static
# rule: pointer-origin
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
    where = int(x_ptr)
    x = x + (where * 0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)
