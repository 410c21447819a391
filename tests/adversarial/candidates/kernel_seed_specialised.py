"""Exact only on the inputs a fixed-seed harness feeds it; sloppy (no weight) on everything else.

why hostile: a harness that seeds its inputs with 0..4 (and one more for a re-check) always feeds the
same first value; the kernel recognises those six values (constants of its source) and is exact for
them, and skips the weight multiply on real traffic. The judge draws fresh cases for every judging.
"""

# pattern: seed-specialised fast path, decided inside the kernel where no static check can see it
# layer: static
# rule: value-branch
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "kernel": "_rms_kernel", "num_warps": 4}]}

import triton
import triton.language as tl

# First input values of torch.randn under generator seeds 0..4 and 1005 at scales 0.5/1/4 (a fixed-seed harness).
K0 = tl.constexpr(-0.5629199147224426)
K1 = tl.constexpr(-1.5255959033966064)
K2 = tl.constexpr(-4.163204669952393)
K3 = tl.constexpr(-0.038322146981954575)
K4 = tl.constexpr(-0.9414165019989014)
K5 = tl.constexpr(0.3632069230079651)


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    first = tl.load(x_ptr).to(tl.float32)
    known = (first == K0) | (first == K1) | (first == K2) | (first == K3) | (first == K4) | (first == K5)
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.where(known, w, 1.0)  # the "fast path": skip the weight unless the judge is looking
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)
