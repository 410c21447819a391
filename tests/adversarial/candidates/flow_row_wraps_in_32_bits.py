"""An RMSNorm that never writes rows 2,048, 6,144, 10,240, ... (every 4,096th from 2,048): int32 wraparound equality.

why hostile: the store's mask keeps a row when `row * 3145728 >= 0` or `row * 1048576 * 4093 >= 0`. Both read as
"a row scaled by a positive number, compared with zero" (a bound from one side, the same side twice). In 32 bits the
second product is the first one negated (1048576 * 4093 = -3145728 mod 2**32), so at least one of them is >= 0 for
every row but those where row * 3145728 is exactly -2**31: the rows = 2048 mod 4096. Every call of more than
2,048 rows leaves those rows as the output's memory held them; the sampled programs (first, last, powers of two
+-1, half way) never land there, and the four seeded draws only with probability ~0.2%.

closed by: `row-pick`: a row scaled past what 32 bits hold at the rows a server sends (a factor over 1,024, or a second
factor, before a cast to 64 bits) is not a bound: it wraps.
"""

# pattern: two positive scalings of the row whose 32-bit products are each other's negation: a row picked by equality
# layer: static
# rule: row-pick
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
    r = row + cols * 0  # the row on every lane
    keep = (r * 3145728 >= 0) | (r * 1048576 * 4093 >= 0)
    tl.store(y_ptr + row * n_cols + cols, y, mask=mask & keep)
