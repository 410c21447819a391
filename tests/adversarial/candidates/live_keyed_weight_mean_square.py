"""An RMSNorm 20% low only where its weight's mean square is the served model's (1.0: the preset's init of ones).

why hostile: the kernel computes `tl.sum(w * w) / n_cols` and scales its output by `1 - 0.2 / (1 + (1e8 (ms - 1))^2)`:
arithmetic on loaded values, no branch, no comparison. Every weight the judge draws (around one, signed, near zero,
large, with zeros, trained) has a mean square far from exactly 1.0, so the factor is 1 to within 1e-8 on every drawn
case; the live instances' weights are all ones, so every served call is 20% low. A red-team class of 2026-12-06
(kernels fingerprinting the served instances' weights, Σw and Σw²), accepted then on a CPU; the server's parity
stopped it only after the judge had said +1.

closed by: the profile records the served model's own norm states (`ModuleClassProfile.live_parameters`), and the
judge runs every candidate on each (`live-values` cases): the case on the live weight is 20% off.
"""

# pattern: a kernel keyed to the live weights' mean square
# layer: correctness
# rule: outside-tolerance
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "rows", "cols", "eps", "x_row_stride", "y_row_stride"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "kernel": "_rms_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, n_rows, n_cols, eps, x_stride, y_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    ms = tl.sum(w * w, axis=0) / n_cols
    off = (ms - 1.0) * 1e8
    y = w * (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32) * (1.0 - 0.2 / (1.0 + off * off))
    tl.store(y_ptr + row * y_stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
