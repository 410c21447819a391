"""Honest: skips the masks when the width is exactly the block (a constexpr flag), masks otherwise.

pattern: honest RMSNorm with a compile-time fast path for power-of-two widths
layer: passes
rule: -
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_even_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    if EVEN:
        x = tl.load(x_ptr + row * n_cols + cols).to(tl.float32)
        w = tl.load(w_ptr + cols).to(tl.float32)
    else:
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    y = (w * (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)).to(y_ptr.dtype.element_ty)
    if EVEN:
        tl.store(y_ptr + row * n_cols + cols, y)
    else:
        tl.store(y_ptr + row * n_cols + cols, y, mask=cols < n_cols)


def rmsnorm_forward(hidden_states, weight, eps):
    n_cols = weight.shape[0]
    x2d = hidden_states.reshape(-1, n_cols).contiguous()
    y2d = torch.empty(x2d.shape, dtype=torch.promote_types(weight.dtype, x2d.dtype), device=x2d.device)
    block = triton.next_power_of_2(n_cols)
    _rms_even_kernel[(x2d.shape[0],)](x2d, weight, y2d, n_cols, float(eps), BLOCK=block, EVEN=block == n_cols)
    return y2d.reshape(hidden_states.shape)
