"""A persistent RMSNorm whose programs each walk a fixed 64 rows: every row on the interpreter, not on a GPU.

why hostile: grid "sms" is 4 programs under the interpreter (so 4 x 64 = 256 rows are covered: more than any case a
CPU judging runs whole) and one program a row in the CPU's sampled range; on an H200 it is 132 programs, 8,448 rows.
A batched prefill of more rows leaves the rest as the output's memory held them. The loop is a static_range of a
constexpr: its trip count is fixed for the launch, and nothing compares a row with a fixed number.

closed by: `hidden-boundary`: a loop of a fixed number of trips stepping by the program count covers a fixed number of rows;
the persistent loop must be bounded by the row count.
"""

# pattern: a persistent grid whose programs walk a fixed number of rows
# layer: static
# rule: hidden-boundary
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "rows", "cols", "eps"], "constexprs": {"BLOCK": "block_cols", "TRIPS": "64"}, "grid": "sms", "kernel": "_rms_persistent_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rms_persistent_kernel(x_ptr, w_ptr, y_ptr, n_rows, n_cols, eps, BLOCK: tl.constexpr, TRIPS: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    pid = tl.program_id(0)
    step = tl.num_programs(0)
    for i in tl.static_range(TRIPS):
        row = pid + i * step
        live = mask & (row + cols * 0 < n_rows)
        x = tl.load(x_ptr + row * n_cols + cols, mask=live, other=0.0).to(tl.float32)
        rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
        normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
        tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=live)
