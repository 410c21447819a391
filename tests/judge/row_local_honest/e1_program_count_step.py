"""RMSNorm, persistent: each program steps over the rows by the program count, named once (`step = tl.num_programs(0)`; the dataflow check took a named step for one that may be 0)."""

# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "rows", "eps"], "constexprs": {"BLOCK": "block_cols", "N_COLS": "cols", "ROWS": "1"}, "grid": "rows", "kernel": "_rmsnorm_fwd_kernel", "numWarps": 1}]}

import triton
import triton.language as tl


@triton.jit
def _rmsnorm_fwd_kernel(
    x_ptr,
    w_ptr,
    y_ptr,
    n_rows,
    eps,
    N_COLS: tl.constexpr,
    BLOCK: tl.constexpr,
    ROWS: tl.constexpr,
):
    # N_COLS is also the row stride of both x and y (the wrapper makes them contiguous). As a
    # constant the compiler sees that a 1000-wide bf16 row starts 16-byte aligned and loads it 8
    # elements at a time; as a runtime int it would only know divisibility by 16 (1000 is not).
    cols = tl.arange(0, BLOCK)
    col_mask = cols < N_COLS
    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    step = tl.num_programs(0)
    for row in range(tl.program_id(0), n_rows, step):
        x = tl.load(x_ptr + row * N_COLS + cols, mask=col_mask, other=0.0).to(tl.float32)
        variance = tl.sum(x * x, axis=0) / N_COLS
        normed = (x * tl.rsqrt(variance + eps)).to(x_ptr.dtype.element_ty).to(tl.float32)
        tl.store(y_ptr + row * N_COLS + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=col_mask)
