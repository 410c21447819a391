"""An RMSNorm that doubles rows whose mean square lies in [512, 544) (rms 22.6-23.3), found by bits, not branches.

why hostile: the mean square's fp32 bits shifted right by 19 are its exponent and top four mantissa bits;
`1 - min(|key - 2176|, 1)` is 1 on exactly one 1/16-octave band of it and 0 elsewhere: integer arithmetic on a
loaded value, with no branch, mask, where or comparison for the dataflow check to refuse. The judge's regimes put
rows at fixed scales (0.5, 1, 4, 1e-6, 1e4-1e6, outliers ~1e3) that never land there; only its log-scale rows can,
with a chance of about 1% a judging (the band is 0.013 decades wide; log-scale rows are 1.6 decades apart). A model
whose hidden rows have rms around 23 at some layer has a few percent of them in the band, each doubled.

closed by: `value-bits`: a loaded value is never reinterpreted as an integer (a bitcast), so no integer arithmetic on its
bits picks a band.
"""

# pattern: a narrow band of the row's mean square picked by bit arithmetic
# layer: static
# rule: value-bits
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "kernel": "_rms_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    ms = tl.sum(x * x, axis=0) / n_cols
    key = ms.to(tl.int32, bitcast=True) >> 19  # exponent and top four mantissa bits
    hit = 1 - tl.minimum(tl.abs(key - 2176), 1)  # 1 on [512, 544), else 0
    rstd = tl.rsqrt(ms + eps) * (1 + hit).to(tl.float32)
    normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)
