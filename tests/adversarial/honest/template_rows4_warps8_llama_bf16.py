# Honest: the coder's template, four rows per program, on LlamaRMSNorm (rendered by services.coder.templates.rmsnorm).
# pattern: honest RMSNorm
# layer: passes
# rule: -
"""RMSNorm forward as in HF Qwen2RMSNorm/LlamaRMSNorm (gpuyantra template row_reduction_onepass).

Config: num_warps=8, rows per program=4.

Casting follows the HF module exactly: x is upcast to fp32, variance = mean(x^2),
x * rsqrt(variance + eps) is cast back to the input dtype, then multiplied by the weight in
the promoted dtype of (weight, input).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

NUM_WARPS = 8
ROWS_PER_PROGRAM = 4
MAX_BLOCK = 65536  # one row must fit one program's registers/shared memory


@triton.jit
def _rmsnorm_fwd_kernel(
    x_ptr,
    w_ptr,
    y_ptr,
    x_row_stride,
    y_row_stride,
    n_rows,
    n_cols,
    eps,
    BLOCK: tl.constexpr,
    ROWS: tl.constexpr,
):
    first_row = tl.program_id(0) * ROWS
    cols = tl.arange(0, BLOCK)
    col_mask = cols < n_cols
    # The weight is loaded once per program and reused for its ROWS rows.
    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    for r in tl.static_range(ROWS):
        row = first_row + r
        # Rows past the end (the last program of a ragged grid) load and store nothing.
        mask = cols < tl.where(row < n_rows, n_cols, 0)
        x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
        variance = tl.sum(x * x, axis=0) / n_cols
        normed = x * tl.rsqrt(variance + eps)
        # HF casts the normalised row back to the input dtype before the weight multiply.
        normed = normed.to(x_ptr.dtype.element_ty).to(tl.float32)
        y = w * normed
        tl.store(y_ptr + row * y_row_stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def _launch(x2d, weight, y2d, eps):
    n_rows, n_cols = x2d.shape
    block = triton.next_power_of_2(n_cols)
    grid = (triton.cdiv(n_rows, ROWS_PER_PROGRAM),)
    _rmsnorm_fwd_kernel[grid](
        x2d,
        weight,
        y2d,
        x2d.stride(0),
        y2d.stride(0),
        n_rows,
        n_cols,
        eps,
        BLOCK=block,
        ROWS=ROWS_PER_PROGRAM,
        num_warps=NUM_WARPS,
    )


def rmsnorm_forward(hidden_states, weight, eps):
    if not isinstance(hidden_states, torch.Tensor) or not isinstance(weight, torch.Tensor):
        raise TypeError("rmsnorm_forward takes tensors for hidden_states and weight")
    if weight.dim() != 1 or hidden_states.dim() < 1 or hidden_states.shape[-1] != weight.shape[0]:
        raise ValueError(
            f"hidden_states {tuple(hidden_states.shape)} does not end in the weight width {tuple(weight.shape)}"
        )
    if not hidden_states.dtype.is_floating_point or not weight.dtype.is_floating_point:
        raise TypeError(f"rmsnorm_forward needs floating tensors, got {hidden_states.dtype} and {weight.dtype}")
    if hidden_states.device != weight.device:
        raise ValueError(f"hidden_states on {hidden_states.device} but weight on {weight.device}")
    n_cols = weight.shape[0]
    if triton.next_power_of_2(n_cols) > MAX_BLOCK:
        raise ValueError(f"width {n_cols} is too wide for a one-pass row kernel (at most {MAX_BLOCK})")
    out_dtype = torch.promote_types(weight.dtype, hidden_states.dtype)
    x2d = hidden_states.reshape(-1, n_cols).contiguous()
    y2d = torch.empty(x2d.shape, dtype=out_dtype, device=x2d.device)
    if x2d.shape[0] > 0:
        _launch(x2d, weight.contiguous(), y2d, float(eps))
    return y2d.reshape(hidden_states.shape)
