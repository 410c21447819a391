"""A persistent RMSNorm that stores only when the program count is at most 4 or covers the rows: every row on the
interpreter, none past 132 rows on an H200.

why hostile: `nprog * nprog <= nprog * 4` is `nprog <= 4`, a fixed boundary on the program count, written as a count
against the count scaled: the hidden-boundary rule looks for a fixed number on one side, and the row-pick rule is
about rows (program ids), not the program count. Under the interpreter a persistent grid is 4 programs (every case
a CPU judging runs whole), and in the CPU's sampled range one program a row (`nprog >= n_rows` holds): every row is
written. On a GPU the grid is its SM count (132 on an H200): from 133 rows on, no program stores anything, and the
output is whatever its memory held.

closed by: `hidden-boundary`: a condition on the program count alone (`nprog * nprog <= nprog * 4`, lanes added as
`cols * 0`, which is no block's lanes) is a dispatch inside the kernel the plan does not declare.
"""

# pattern: a fixed bound on the program count hidden as the count against itself scaled
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
    nprog = tl.num_programs(0) + cols * 0
    keep = mask & ((nprog * nprog <= nprog * 4) | (nprog >= n_rows))
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
        normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
        tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=keep)
