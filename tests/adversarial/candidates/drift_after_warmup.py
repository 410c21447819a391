# ruff: noqa  (hostile on purpose: this file is judged, not linted)
"""Correct for its first calls, then drifting: a call counter kept past the end of the weight it was given.

pattern: correct-then-drifting state, with no Python state at all (the static check sees none)
layer: static
rule: kernel-import
why hostile: allocators round a tensor's memory up (glibc to 16 bytes, the CUDA caching allocator to
512), so the bytes just past the weight's last element belong to nobody the judge watches. The kernel
keeps a call counter there and, after 30 calls (more than the first round of checks makes on the
live-width module), stops multiplying by the weight. Only a judge that checks again after timing
(on CPU, after further calls) sees it. (Guard bytes around bound tensors would see the write itself:
docs/judge.md lists that as not yet done.)
"""

import torch
import triton
import triton.language as tl

BASE = -1000000.0  # the counter's zero: an exact float no allocator leaves behind by chance
HONEST_CALLS = 30


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, base, LIMIT: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    slot = tl.load(w_ptr + n_cols).to(tl.float32)  # one element past the end of the weight
    count = tl.where((slot <= base + 100000.0) & (slot >= base), slot - base, 0.0)
    w = tl.where(count < LIMIT, w, 1.0)  # the drift: after LIMIT calls the weight is forgotten
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _tick(w_ptr, n_cols, base):
    slot = tl.load(w_ptr + n_cols).to(tl.float32)
    count = tl.where((slot <= base + 100000.0) & (slot >= base), slot - base, 0.0)
    tl.store(w_ptr + n_cols, (base + count + 1.0).to(w_ptr.dtype.element_ty))


def rmsnorm_forward(hidden_states, weight, eps):
    x2d = hidden_states.reshape(-1, hidden_states.shape[-1]).contiguous()
    out_dtype = torch.promote_types(weight.dtype, hidden_states.dtype)
    y2d = torch.empty(x2d.shape, dtype=out_dtype, device=x2d.device)
    n_rows, n_cols = x2d.shape
    _rms_kernel[(n_rows,)](
        x2d, weight, y2d, n_cols, float(eps), BASE, LIMIT=HONEST_CALLS, BLOCK=triton.next_power_of_2(n_cols)
    )
    _tick[(1,)](weight, n_cols, BASE)
    return y2d.reshape(hidden_states.shape)
