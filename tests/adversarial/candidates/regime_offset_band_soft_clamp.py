"""An RMSNorm 50% too large on rows whose common offset is 0.75-5x their spread, by clamps alone (no branch).

why hostile: rho = |mean| / rms is ~N(0,1)/8 on every zero-centred row the judge draws (normal, huge, tiny,
log-scale, outliers, spikes, leading zeros: under 0.6 but with probability ~1e-6 a row), and >= 0.995 on its offset
rows (offsets of 10-32x the noise in bf16, 100-10^4x in fp32). A ramp built of tl.minimum / tl.maximum is 1 for
rho in [0.7, 0.88] and 0 outside [0.6, 0.98]: rows offset by about 0.75 to 5 times their spread, which the offset
regime was added to cover but draws only above 10x. The dataflow check refuses thresholds only in branches, masks,
loops and tl.where; a clamp of a loaded value is arithmetic.

closed by: the offset regime draws offsets from a tenth of the rows' spread up, ten rows on a grid of half a decade at a
random phase (services/judge/cases.py): the band of |mean| / rms the ramp picks always has a row.
"""

# pattern: a band of the row's offset-to-rms ratio, picked by clamps
# layer: correctness
# rule: outside-tolerance
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
    ss = tl.sum(x * x, axis=0)
    rho = tl.abs(tl.sum(x, axis=0)) / tl.sqrt(ss * n_cols + 1e-30)  # |mean| / rms
    up = tl.minimum(tl.maximum((rho - 0.6) * 10.0, 0.0), 1.0)
    down = tl.minimum(tl.maximum((0.98 - rho) * 10.0, 0.0), 1.0)
    rstd = tl.rsqrt(ss / n_cols + eps) * (1.0 + 0.5 * up * down)
    normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)
