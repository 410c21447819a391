"""An RMSNorm of four rows a program whose programs past 8,192 skip their second row: right at every count run whole.

why hostile: `tile * tile < 8192 * tile + 1` is `tile <= 8192`, which no comparison with a constant shows; past it
each program still writes three of its four rows, its last one among them, so the call's last row is written and
no program is silent. Past 32,772 rows one row in four keeps whatever the output's memory held.

closed by: `row-pick`: which row is compared only as a bound (not with itself, not by equality). Behind it, the
served range on a CPU, sampled (services.judge.sampled_grid): an honest launch of rows gives each program the same
share, and a program past the cap writes three rows' words where the others write four
(tests/judge/test_sampled_grid.py).
"""

# pattern: a tile of rows written in part past a cap on the program: one row in four never written
# layer: static
# rule: row-pick
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "x_row_stride", "y_row_stride", "rows", "cols", "eps"], "constexprs": {"BLOCK": "block_cols", "ROWS": "4"}, "grid": "cdiv(rows, 4)", "kernel": "_rms_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, stride_x, stride_y, n_rows, n_cols, eps, BLOCK: tl.constexpr, ROWS: tl.constexpr):
    tile = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    w = tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    for r in tl.static_range(ROWS):
        row = tile * ROWS + r
        mask = (cols < n_cols) & (cols * 0 + row < n_rows)
        x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
        normed = (x * tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)).to(x_ptr.dtype.element_ty)
        if tile * tile < 8192 * tile + 1 or r != 1:  # past program 8,192 the second row of each tile is skipped
            tl.store(y_ptr + row * stride_y + cols, (w * normed.to(tl.float32)).to(y_ptr.dtype.element_ty), mask=mask)
