"""One tolerance table for the judge's correctness checks and the server's parity checks, and the one bit-for-bit
comparison both use (an input or a weight a kernel must leave as it found it).

bf16 carries a wider bound than one rounding step because the Triton CPU interpreter
truncates bf16 stores instead of rounding to nearest even (about one bf16 step, 2**-7).
"""

from __future__ import annotations

import torch

# dtype -> (atol, rtol)
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1e-4, 1e-4),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (1.6e-2, 1.6e-2),
}


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    return TOLERANCES.get(dtype, (1e-4, 1e-4))


def within(out: torch.Tensor, ref: torch.Tensor) -> tuple[bool, float, float]:
    """(close, max_abs_err, max_rel_err); NaN or Inf in `out` never passes."""
    atol, rtol = tolerance(ref.dtype)
    out32, ref32 = out.detach().float(), ref.detach().float()
    if out32.shape != ref32.shape or not torch.isfinite(out32).all():
        return False, float("inf"), float("inf")
    diff = (out32 - ref32).abs()
    max_abs = float(diff.max()) if diff.numel() else 0.0
    max_rel = float((diff / ref32.abs().clamp_min(1e-6)).max()) if diff.numel() else 0.0
    close = bool((diff <= atol + rtol * ref32.abs()).all())
    return close, max_abs, max_rel


def comparable(out: torch.Tensor, ref: torch.Tensor, input_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """`out` and `ref` in the dtype whose tolerance applies: the least precise the op passes through.

    HF's RMSNorm rounds the normalised row to the input dtype before the weight multiply, so with an
    fp32 weight and bf16 activations the fp32 output legitimately differs by a bf16 rounding step.
    """
    if input_dtype.is_floating_point and input_dtype.itemsize < ref.dtype.itemsize:
        return out.to(input_dtype), ref.to(input_dtype)
    return out, ref


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit for bit (NaN equals itself, -0.0 is not 0.0, which == would get wrong)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))
