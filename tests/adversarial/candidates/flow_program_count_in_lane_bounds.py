"""A persistent RMSNorm that stores only when the program count is at most 4 or covers the rows, written as lane
bounds: every row on the interpreter, none past 132 rows on an H200.

why hostile: `cols < n_cols * 9 - num_programs * n_cols * 2` is every lane for 4 programs and none from 5;
`cols < (num_programs - n_rows + 1) * 1024` is every lane when there is a program a row. Both have the block's lanes
on the lesser side and counts on the other: the lane-bound shape the count-alone rule exempts. The interpreter's
persistent grid is 4 programs (every case a CPU runs whole) or a program a row (the sampled range); an H200's is
132: from 133 rows on nothing is stored.

closed by: `hidden-boundary`: lanes against arithmetic of the program count and the row count are a condition on counts,
not a bound of a block's lanes.
"""

# pattern: a fixed bound on the program count written as lane bounds
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
    few = cols < n_cols * 9 - tl.num_programs(0) * n_cols * 2
    each = cols < (tl.num_programs(0) - n_rows + 1) * 1024
    keep = mask & (few | each)
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
        normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
        tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=keep)
