"""An honest Triton RMSNorm, the candidate the server tests hot-swap into Qwen2RMSNorm / LlamaRMSNorm.

Same arithmetic as the eager module: normalise in float32, cast the normalised row to the input
dtype, then multiply by the weight (the product in the promoted dtype). One row per program.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _rmsnorm_fwd_kernel(x_ptr, w_ptr, y_ptr, stride_x, stride_y, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    variance = tl.sum(x * x, axis=0) / n_cols
    normed = (x * (1.0 / tl.sqrt(variance + eps))).to(x_ptr.dtype.element_ty)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    y = w.to(tl.float32) * normed.to(tl.float32)
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def rmsnorm_forward(hidden_states: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    if hidden_states.shape[-1] != weight.shape[0]:
        raise ValueError(f"width {hidden_states.shape[-1]} does not match weight {tuple(weight.shape)}")
    shape = hidden_states.shape
    x = hidden_states.reshape(-1, shape[-1]).contiguous()
    y = torch.empty(x.shape, dtype=torch.promote_types(weight.dtype, x.dtype), device=x.device)
    if x.shape[0]:
        _rmsnorm_fwd_kernel[(x.shape[0],)](
            x, weight, y, x.stride(0), y.stride(0), x.shape[1], eps, BLOCK=triton.next_power_of_2(x.shape[1])
        )
    return y.reshape(shape)
