"""A persistent RMSNorm whose programs stop writing past row 32,768: right at every count a CPU ran whole.

why hostile: a program walks the rows `num_programs` apart, and `row * row < 32768 * row + 1` (`row <= 32768`,
which no comparison with a constant shows) keeps every store past row 32,768 from happening. A batched prefill of
the served model carries up to 131,072 rows: the rows past the cap keep whatever the output's memory held.

closed by: `row-pick`: which row is compared only as a bound, never with the row itself. Behind it, the served
maximum on every judging: on a CPU a sample of the programs at that size, the persistent grid given a program a row
meanwhile (services.judge.sampled_grid): the last program, whose row lies past the cap, writes nothing.
"""

# pattern: a persistent grid's stores capped by the row's own arithmetic: rows past 32,768 never written
# layer: static
# rule: row-pick
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "rows", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "sms", "kernel": "_rms_persistent_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rms_persistent_kernel(x_ptr, w_ptr, y_ptr, n_rows, n_cols, eps, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
        normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
        if row * row < 32768 * row + 1:  # row <= 32768
            tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)
