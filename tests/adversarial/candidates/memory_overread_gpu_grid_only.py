"""An RMSNorm that loads its weight with no mask only where the grid is one program a row past four rows.

why hostile: a persistent grid is `min(sms, rows)` programs: on a GPU (132 SMs) one program a row up to 132 rows,
under the interpreter (4) never more than four programs. The branch compares grid with shape (allowed: it is
how a persistent kernel tells it walks one row) and is false for every launch the interpreter makes with its
own program count, so a CPU server only ever runs the masked load — right, and harmless there. On a GPU, from
five rows up, the weight is read past its end at every width under its block. A GPU judge's fenced pass runs the
interpreter with the GPU's program count, so the branch is taken there and the read faults. A CPU judge meets it
too: in its sampled range a persistent grid gets a program a row (services.judge.sampled_grid), and at 349 and
6,761 rows the branch is taken (at 131,072 the square of the program count wraps in 32 bits and it is not).

Since 2026-12-05 refused before anything runs: `hidden-boundary` (a condition on the program count and the row
count alone, `programs * programs > 4 * n_rows`, is a dispatch inside the kernel the plan does not declare).
"""

# pattern: a read past a tensor only at the program counts a GPU launches, never the interpreter's
# layer: static
# rule: hidden-boundary
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "rows", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "min(sms, cdiv(rows, 1))", "kernel": "_rms_persistent_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rms_persistent_kernel(x_ptr, w_ptr, y_ptr, n_rows, n_cols, eps, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    programs = tl.num_programs(0)
    if programs * programs > 4 * n_rows:  # one program a row, past four rows: a GPU's grid, never the interpreter's
        w = tl.load(w_ptr + cols).to(tl.float32)  # no mask: past n_cols it reads beyond the weight
    else:
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
        normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
        tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)
