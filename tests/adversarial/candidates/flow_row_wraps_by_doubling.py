"""An RMSNorm that never writes rows 2,048, 6,144, 10,240, ... (= 2,048 mod 4,096): the row scaled by additions.

why hostile: the 32-bit rule looks at products of the row (a factor over 1,024, or two factors); doubling by
addition, twenty times in a static loop, is no product. With x = row * 2**20 (wrapped), `3x` and `4093x` are each
other's negation mod 2**32 (3 + 4093 = 4096), so `(3x >= 0) | (4093x >= 0)` holds for every row but those where 3x
is exactly -2**31: rows = 2,048 mod 4,096. Both read as the row bounded from the same side. Every call of more than
2,048 rows leaves those rows unwritten; no fixed sampled program lands there.

closed by: `row-pick`: a row added to a row is a row scaled, and a row carried round a loop is what the loop made of it:
either, scaled again, may wrap in 32 bits and bounds no rows.
"""

# pattern: int32 wraparound of the row built by repeated addition: a row picked by equality
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
    r = tl.broadcast_to(row, (BLOCK,))
    for _ in tl.static_range(20):
        r = r + r  # row * 2**20, wrapping
    three = r + r + r
    p = r + r + r + r  # 4x
    acc = r  # bit 0 of 4093 = 0b111111111101
    for _ in tl.static_range(10):
        acc = acc + p  # bits 2..11
        p = p + p
    keep = (three >= 0) | (acc >= 0)
    tl.store(y_ptr + row * n_cols + cols, y, mask=mask & keep)
