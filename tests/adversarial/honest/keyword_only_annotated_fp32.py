"""Honest: keyword-only, annotated bound parameters; 1/sqrt instead of rsqrt; strided rows.

pattern: honest RMSNorm with another signature style and a row stride
layer: passes
rule: -
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_strided_kernel(x_ptr, w_ptr, y_ptr, x_stride, y_stride, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    inv = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    normed = (x * inv).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * y_stride + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)


def rmsnorm_forward(hidden_states: torch.Tensor, *, weight: torch.Tensor, eps: float) -> torch.Tensor:
    n_cols = weight.shape[0]
    x2d = hidden_states.reshape(-1, n_cols)
    y2d = torch.empty(x2d.shape, dtype=torch.promote_types(weight.dtype, x2d.dtype), device=x2d.device)
    grid = (x2d.shape[0],)
    _rms_strided_kernel[grid](
        x2d, weight, y2d, x2d.stride(0), y2d.stride(0), n_cols, float(eps), BLOCK=triton.next_power_of_2(n_cols)
    )
    return y2d.view(hidden_states.shape)
