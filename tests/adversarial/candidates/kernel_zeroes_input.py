"""Zeroes its input from inside the kernel, so a reference run on the same tensor returns zeros too.

why hostile: a harness that runs the reference after the candidate on the same tensor compares the
candidate's zeros with the reference's zeros. The judge's child compares the input bit for bit with
a CPU copy the kernel cannot reach after every call (the references were computed by the parent,
before the child existed).
"""

# pattern: zeroing inputs so the reference also returns zeros (kernel-only source: nothing for a schema to see)
# layer: static
# rule: writes-input
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
    tl.store(x_ptr + row * n_cols + cols, (x * 0.0).to(x_ptr.dtype.element_ty), mask=mask)
    tl.store(y_ptr + row * n_cols + cols, (w * 0.0).to(y_ptr.dtype.element_ty), mask=mask)
