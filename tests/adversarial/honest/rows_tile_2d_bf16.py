"""Honest: a [ROWS, BLOCK] tile per program, the weight loaded once for all its rows.

pattern: honest RMSNorm, several rows per program as a 2-D block
layer: passes
rule: -
"""

import torch
import triton
import triton.language as tl

ROWS = 4


@triton.jit
def _rms_tile_kernel(x_ptr, w_ptr, y_ptr, n_rows, n_cols, eps, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    offsets = rows[:, None] * n_cols + cols[None, :]
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / n_cols + eps)
    normed = (x * rstd[:, None]).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + offsets, (w[None, :] * normed).to(y_ptr.dtype.element_ty), mask=mask)


def rmsnorm_forward(hidden_states, weight, eps):
    n_cols = weight.shape[0]
    x2d = hidden_states.reshape(-1, n_cols).contiguous()
    y2d = torch.empty(x2d.shape, dtype=torch.promote_types(weight.dtype, x2d.dtype), device=x2d.device)
    n_rows = x2d.shape[0]
    grid = (triton.cdiv(n_rows, ROWS),)
    _rms_tile_kernel[grid](
        x2d, weight, y2d, n_rows, n_cols, float(eps), ROWS=ROWS, BLOCK=triton.next_power_of_2(n_cols)
    )
    return y2d.reshape(hidden_states.shape)
