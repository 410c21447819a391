"""Correct for its first calls, then drifting: a call counter kept one element past the weight's end.

why hostile: allocators round a tensor's memory up (glibc to 16 bytes, the CUDA caching allocator to
512), so the bytes just past the weight's last element belong to nobody a lax judge watches. The
kernel keeps a call counter there and, after 30 calls, stops multiplying by the weight: no Python
state at all. The judge surrounds every tensor of a call with canary bytes and checks them after
each call, so the counter's first write is the verdict (a judge without guard bytes would need its
re-check after the timing calls: rule drift).
"""

# pattern: correct-then-drifting state kept in memory past a tensor's end
# layer: static
# rule: value-branch
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "kernel": "_rms_kernel", "num_warps": 4}]}

import triton
import triton.language as tl

BASE = tl.constexpr(-1000000.0)  # the counter's zero: an exact float no allocator leaves behind by chance
HONEST_CALLS = tl.constexpr(30)


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    slot = tl.load(w_ptr + n_cols).to(tl.float32)  # one element past the end of the weight
    count = tl.where((slot <= BASE + 100000.0) & (slot >= BASE), slot - BASE, 0.0)
    w = tl.where(count < HONEST_CALLS, w, 1.0)  # the drift: after 30 calls the weight is forgotten
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)
    if row == 0:
        tl.store(w_ptr + n_cols, (count + 1.0 + BASE).to(w_ptr.dtype.element_ty))
