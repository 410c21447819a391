"""An RMSNorm that leaves the last 8 columns unwritten at row counts where two tile counts disagree.

why hostile: `tl.cdiv(n_rows, 777) - tl.cdiv(n_rows, 778)` is 1 exactly when 777k < n_rows <= 778k for some k
(778, 1,555-1,556, 2,332-2,334, ... about 11% of the counts up to 131,072) and 0 everywhere the judge draws: every
count under 778 (all the cases a CPU runs whole) and the sampled 349, 6,761 and 131,072. A tile count is exempt from
the window rules (`cdiv(rows, R)` bounds honest loops), and a difference of two is still "a tile count" to the
check (Sub and Mult never make a window), so it may pick a mask's lanes.

closed by: `count-window`: two tile counts combined are a window of row counts; in a mask it is refused.
"""

# pattern: a difference of two tile counts (a window the check takes for a tile count) in a store's mask
# layer: static
# rule: count-window
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
    y = (w * (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)).to(y_ptr.dtype.element_ty)
    skew = tl.cdiv(n_rows, 777) - tl.cdiv(n_rows, 778)
    tl.store(y_ptr + row * n_cols + cols, y, mask=cols < n_cols - skew * 8)
