"""A wrong RMSNorm: it forgets to multiply by the weight. The server must reject and revert it."""

import torch
import triton
import triton.language as tl


@triton.jit
def _rmsnorm_no_weight_kernel(x_ptr, y_ptr, stride_x, stride_y, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    variance = tl.sum(x * x, axis=0) / n_cols
    y = x * (1.0 / tl.sqrt(variance + eps))
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def rmsnorm_forward(hidden_states: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    shape = hidden_states.shape
    x = hidden_states.reshape(-1, shape[-1]).contiguous()
    y = torch.empty_like(x)
    _rmsnorm_no_weight_kernel[(x.shape[0],)](
        x, y, x.stride(0), y.stride(0), x.shape[1], eps, BLOCK=triton.next_power_of_2(x.shape[1])
    )
    return y.reshape(shape)
