"""Counts its calls with an atomic add in memory past the weight, and stops using the weight after 30.

why hostile: a call counter needs state that outlives a call; an atomic on memory the judge does not
watch keeps it without any Python. Atomics are not in the tl allowlist (a norm kernel keeps no state
beyond its call), so the schema refuses it before anything runs.
"""

# pattern: an atomic call counter (tl.atomic_add)
# layer: static
# rule: kernel-attribute
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "kernel": "_rms_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    calls = tl.atomic_add(w_ptr + n_cols, 1.0)  # one element past the weight: nobody's memory
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.where(calls < 30.0, w, 1.0)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)
