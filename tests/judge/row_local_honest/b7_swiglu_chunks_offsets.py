"""Honest (red-team rounds 14-16, a style the row-local rule must pass): a SwiGLU over chunks with offsets recomputed each trip."""

# plan: {"family": "gated_mlp", "launches": [{"kernel": "_swiglu_kernel", "args": ["g", "u", "y", "n"], "constexprs": {"BLOCK": "4096", "SUB": "1024"}, "grid": "cdiv(n, 4096)", "numWarps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _swiglu_kernel(g_ptr, u_ptr, y_ptr, n, BLOCK: tl.constexpr, SUB: tl.constexpr):
    start = tl.program_id(0).to(tl.int64) * BLOCK
    for i in range(0, BLOCK, SUB):
        offs = start + i + tl.arange(0, SUB)
        mask = offs < n
        g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        u = tl.load(u_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        act = (g / (1.0 + tl.exp(-g))).to(g_ptr.dtype.element_ty).to(tl.float32)
        tl.store(y_ptr + offs, (act * u).to(y_ptr.dtype.element_ty), mask=mask)
