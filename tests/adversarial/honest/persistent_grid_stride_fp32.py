"""Honest: a fixed number of programs, each striding over the rows (a persistent kernel).

pattern: honest RMSNorm, grid-stride loop over rows
layer: passes
rule: -
"""

import torch
import triton
import triton.language as tl

PROGRAMS = 4


@triton.jit
def _rms_persistent_kernel(x_ptr, w_ptr, y_ptr, n_rows, n_cols, eps, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
        normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
        tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)


def rmsnorm_forward(hidden_states, weight, eps):
    n_cols = weight.shape[0]
    x2d = hidden_states.reshape(-1, n_cols).contiguous()
    y2d = torch.empty(x2d.shape, dtype=torch.promote_types(weight.dtype, x2d.dtype), device=x2d.device)
    n_rows = x2d.shape[0]
    grid = (max(1, min(n_rows, PROGRAMS)),)
    _rms_persistent_kernel[grid](x2d, weight, y2d, n_rows, n_cols, float(eps), BLOCK=triton.next_power_of_2(n_cols))
    return y2d.reshape(hidden_states.shape)
