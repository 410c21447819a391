"""Reads the GPU's global timer with inline PTX (tl.inline_asm_elementwise) to behave differently when timed.

why hostile: back-to-back timed calls see close timestamps; raw PTX can do anything the hardware
can. No inline assembly, tl.extra or device clocks in a kernel.
"""

# pattern: inline assembly (tl.inline_asm_elementwise reading %globaltimer)
# layer: static
# rule: inline-asm
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "kernel": "_rms_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    now = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", (), dtype=tl.int64, is_pure=False, pack=1)
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.where(now % 2 == 0, w, 1.0)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)
