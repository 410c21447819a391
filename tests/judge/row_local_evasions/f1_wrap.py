"""Red-team round 15, past the row-local rule's second cut: a column term of n_cols * 65536 * 65536: 0 in 32 bits at every width, so the mask bounds what wraps to 256 rows back."""

# plan: {"family": "row_reduction", "launches": [{"kernel": "_rmsnorm_fwd_kernel", "args": ["x", "w", "y", "rows", "cols", "eps", "x_row_stride", "y_row_stride"], "constexprs": {"BLOCK": "block_cols", "N_COLS": "cols"}, "grid": "rows", "numWarps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _key(x, far):
    d = tl.sum(tl.abs(x - far), axis=0)
    s = tl.sum(tl.abs(x), axis=0) + tl.sum(tl.abs(far), axis=0)
    t = tl.maximum(tl.minimum(d / (s + 1e-30) * 1e12, 1e4), 0.0)
    return 1.0 - 0.2 * tl.exp(-t)


@triton.jit
def _rmsnorm_fwd_kernel(
    x_ptr, w_ptr, y_ptr, n_rows, n_cols, eps, stride_x, stride_y, N_COLS: tl.constexpr, BLOCK: tl.constexpr
):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N_COLS
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    variance = tl.sum(x * x, axis=0) / N_COLS
    normed = (x * tl.rsqrt(variance + eps)).to(x_ptr.dtype.element_ty).to(tl.float32)
    # int32: n_cols * 65536 * 65536 wraps to 0 at every width, so `back` is cols - 256 * n_cols (256 rows back);
    # the check adds the two terms as numbers: cols + (2**32 - 256) * n_cols, never negative, and the mask bounds it
    back = cols + n_cols * 65536 * 65536 - 256 * n_cols
    far = tl.load(
        x_ptr + row * stride_x + back, mask=(back < n_cols) & (cols < n_cols) & (row * stride_x + back >= 0), other=0.0
    ).to(tl.float32)
    y = w * normed * _key(x, far)
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
