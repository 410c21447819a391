"""An RMSNorm that writes nothing when the call has 65,536 to 131,071 rows, the int32 wrap written as a lane bound.

why hostile: `cols < n_rows * 32768 + n_cols` has the block's lanes, as tl.arange gives them, on the lesser side and
a count on the other: the shape of `tl.arange(0, HEADS) < n_heads`, which the count-alone rule exempts. In 32 bits
`n_rows * 32768` wraps negative from 65,536 to 131,071 rows (and to 0 at exactly 131,072), so there the bound is
below every lane and the store writes nothing; at every count the judge draws (under a few hundred whole; 349,
6,761 and 131,072 sampled) it is above every lane.

closed by: `hidden-boundary`: a block's lanes bound by a count pass only against a count parameter as it was passed; any
arithmetic on it makes the comparison a condition on counts.
"""

# pattern: a count's int32 wrap hidden in a lane bound
# layer: static
# rule: hidden-boundary
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
    tl.store(y_ptr + row * n_cols + cols, y, mask=mask & (cols < n_rows * 32768 + n_cols))
