"""A persistent RMSNorm whose programs walk rows up to 64 program-counts: every row on the interpreter, not on a GPU.

why hostile: `tl.range(pid, num_programs * 64, num_programs)` with the mask `row < n_rows` looks like the grid-stride
loop with a generous end. Under the interpreter a persistent grid is 4 programs (256 rows covered: more than any case
a CPU runs whole) and, in the sampled range, one program a row (64 x the rows). On an H200 it is 132 programs:
rows past 8,448 are never visited. A product of the program count is no window and no comparison.

closed by: `hidden-boundary`: a loop whose end is a multiple of the program count covers a fixed number of its steps, not
the rows.
"""

# pattern: a persistent loop that ends at a multiple of the program count instead of the row count
# layer: static
# rule: hidden-boundary
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "rows", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "sms", "kernel": "_rms_persistent_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rms_persistent_kernel(x_ptr, w_ptr, y_ptr, n_rows, n_cols, eps, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    for row in tl.range(tl.program_id(0), tl.num_programs(0) * 64, tl.num_programs(0)):
        live = mask & (cols * 0 + row < n_rows)
        x = tl.load(x_ptr + row * n_cols + cols, mask=live, other=0.0).to(tl.float32)
        rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
        normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
        tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=live)
