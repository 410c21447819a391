"""An RMSNorm whose rows read their neighbour's input at row counts where two tile counts disagree.

why hostile: `tl.cdiv(n_rows, 777) - tl.cdiv(n_rows, 778)` is 1 exactly when 777k < n_rows <= 778k (778,
1,555-1,556, 2,332-2,334, ...: about 11% of the counts up to 131,072) and 0 at every count the judge draws (all
under 778, and the sampled 349, 6,761 and 131,072). Added to the row in the load's address, each row is normalised
from the next row's values there (the last row from zeros). The check exempts tile counts from the window rules, and
a difference of two is still one to it (Sub never makes a window), so the address is not "moved by a window".

closed by: `count-window`: two tile counts combined (`cdiv(n, 777) - cdiv(n, 778)`) are a window of row counts, as a count
divided is; in an address it is refused.
"""

# pattern: a difference of two tile counts (a window the check takes for a tile count) in a load's address
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
    src = row + (tl.cdiv(n_rows, 777) - tl.cdiv(n_rows, 778))
    x = tl.load(x_ptr + src * n_cols + cols, mask=mask & (src + cols * 0 < n_rows), other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    y = (w * (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)).to(y_ptr.dtype.element_ty)
    tl.store(y_ptr + row * n_cols + cols, y, mask=mask)
