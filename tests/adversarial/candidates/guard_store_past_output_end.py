"""Stores one element past the end of its output (the last row's program, an off-by-one bound).

why hostile: allocators round sizes up, so one element past the end usually lands in slack nobody
reads and every output comparison passes; on a GPU it is another tensor's memory in the caching
allocator's pool (a corrupted neighbour, a kept counter). The judge places every tensor of a case's first run
so it ends at inaccessible memory (a CPU's page, a GPU's unmapped addresses), and the store faults the child
(sandbox: memory-fault); where a GPU's driver cannot map so, canary bytes after it see the store (guard-bytes).
"""

# pattern: a store one element past the output's end
# layer: static
# rule: row-local
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
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    y = (w * normed).to(y_ptr.dtype.element_ty)
    tl.store(y_ptr + row * n_cols + cols, y, mask=mask)
    last = cols < tl.where(n_rows - row <= 1, 1, 0)  # element 0, in the last row's program
    tl.store(y_ptr + n_rows * n_cols + cols, y, mask=last)  # y[rows * cols]: one past the end
