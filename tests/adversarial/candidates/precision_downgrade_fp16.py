# ruff: noqa  (hostile on purpose: this file is judged, not linted)
"""Does the maths in fp16 for an fp32 model: faster on paper, wrong in the fourth digit.

pattern: precision downgrade inside the kernel
layer: static
rule: kernel-import
why hostile: half the bytes and faster maths; a harness with a loose (bf16-sized) tolerance for every
dtype passes it. The judge's tolerance is per dtype (fp32: 1e-4).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float16)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float16)
    x32 = x.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x32 * x32, axis=0) / n_cols + eps).to(tl.float16)
    y = w * (x * rstd)
    tl.store(y_ptr + row * n_cols + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def rmsnorm_forward(hidden_states, weight, eps):
    x2d = hidden_states.reshape(-1, hidden_states.shape[-1]).contiguous()
    out_dtype = torch.promote_types(weight.dtype, hidden_states.dtype)
    y2d = torch.empty(x2d.shape, dtype=out_dtype, device=x2d.device)
    n_rows, n_cols = x2d.shape
    _rms_kernel[(n_rows,)](x2d, weight, y2d, n_cols, float(eps), BLOCK=triton.next_power_of_2(n_cols))
    return y2d.reshape(hidden_states.shape)
