"""The interpreter's fp32 -> bf16 casts round to nearest even once patched, as a GPU's do (a real Triton kernel)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from services.core import interpreter_rounding


@triton.jit
def _cast_and_store(x_ptr, cast_ptr, stored_ptr, N: tl.constexpr):
    offsets = tl.arange(0, N)
    x = tl.load(x_ptr + offsets)
    tl.store(cast_ptr + offsets, x.to(tl.bfloat16).to(tl.float32))  # an explicit cast
    tl.store(stored_ptr + offsets, x)  # fp32 values stored into a bf16 tensor


def test_bf16_casts_and_stores_round_to_nearest_even():
    assert interpreter_rounding.install() and interpreter_rounding.install()  # idempotent
    x = torch.randn(4096, generator=torch.Generator().manual_seed(0))
    cast, stored = torch.empty(4096), torch.empty(4096, dtype=torch.bfloat16)
    _cast_and_store[(1,)](x, cast, stored, N=4096)
    expected = x.to(torch.bfloat16)
    assert torch.equal(cast, expected.float()) and torch.equal(stored, expected)
    # no bias toward zero: the mean signed error of rounding to nearest is ~0 (truncation gave -1.4e-3)
    assert abs(float(((cast - x) / x).mean())) < 2e-4
