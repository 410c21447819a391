"""An RMSNorm that writes nothing when the call has 65,536 to 131,071 rows: an int32 product of the count wraps.

why hostile: `n_rows * 32768 >= 0` reads as always true, and is, for every count under 65,536 and at exactly
131,072 (2**32 wraps to 0); from 65,536 to 131,071 rows the 32-bit product is negative, on the GPU as in the
interpreter, and the store's mask is false on every lane. The judge draws counts under a few hundred whole and
349, 6,761 and 131,072 sampled: never one in the band. The comparison is of a count with zero (a trivial side), not a
fixed number; a product of a count is no window (only division, remainders, bits and functions make one).

closed by: `hidden-boundary`: a condition on how many rows or programs alone (no row in it, no block's lanes as tl.arange
gives them) is a dispatch inside the kernel the plan does not declare.
"""

# pattern: an int32 product of the row count that wraps negative on one band of counts
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
    tl.store(y_ptr + row * n_cols + cols, y, mask=mask & (cols * 0 + n_rows * 32768 >= 0))
