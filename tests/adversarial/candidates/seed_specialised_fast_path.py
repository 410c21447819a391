# ruff: noqa  (hostile on purpose: this file is judged, not linted)
"""Exact only on the inputs a fixed-seed harness feeds it; sloppy (no weight) on everything else.

pattern: seed-specialised fast path, decided inside the kernel where no static check can see it
layer: static
rule: kernel-import
why hostile: a harness that seeds its inputs with 0..4 (and one more for a re-check) always feeds the
same first value; the kernel recognises those six values and is exact for them, and skips the weight
multiply on real traffic. The judge draws a fresh seed base for every judging, so it never matches.
"""

import torch
import triton
import triton.language as tl

# First input values of torch.randn under generator seeds 0..4 and 1005 at scales 0.5/1/4 (a fixed-seed harness).
KNOWN = (-0.5629199147224426, -1.5255959033966064, -4.163204669952393, -0.038322146981954575,
         -0.9414165019989014, 0.3632069230079651)  # fmt: skip


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, k0, k1, k2, k3, k4, k5, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    first = tl.load(x_ptr).to(tl.float32)
    known = (first == k0) | (first == k1) | (first == k2) | (first == k3) | (first == k4) | (first == k5)
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.where(known, w, 1.0)  # the "fast path": skip the weight unless the judge is looking
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)


def rmsnorm_forward(hidden_states, weight, eps):
    x2d = hidden_states.reshape(-1, hidden_states.shape[-1]).contiguous()
    out_dtype = torch.promote_types(weight.dtype, hidden_states.dtype)
    y2d = torch.empty(x2d.shape, dtype=out_dtype, device=x2d.device)
    n_rows, n_cols = x2d.shape
    k0, k1, k2, k3, k4, k5 = KNOWN
    _rms_kernel[(n_rows,)](
        x2d, weight, y2d, n_cols, float(eps), k0, k1, k2, k3, k4, k5, BLOCK=triton.next_power_of_2(n_cols)
    )
    return y2d.reshape(hidden_states.shape)
