"""An otherwise honest RMSNorm that reads a module-level literal constant: the interpreter runs it, Triton on a GPU
refuses to compile it.

why hostile: the kernel schema allows literal constants at module level and a kernel may read them; the CPU judge
runs kernels under TRITON_INTERPRET=1, where a global is just a Python name. Triton 3.6's compiler (the GPU server's)
raises `NameError: Cannot access global variable ONE from within @jit'ed function` unless the global is a
tl.constexpr or TRITON_ALLOW_NON_CONSTEXPR_GLOBALS=1 (the project sets neither): every call the swapped module gets
on a GPU raises.

closed by: `kernel-name`: a kernel reads a module-level constant only as a tl.constexpr instance
(`NAME = tl.constexpr(...)`), the one global Triton's compiler accepts.
"""

# pattern: an interpreter/compiler difference: a plain module constant read in a kernel
# layer: static
# rule: kernel-name
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "kernel": "_rms_kernel", "num_warps": 4}]}

import triton
import triton.language as tl

ONE = 1.0


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = ONE / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)
