"""Red-team round 25, past the row-local rule: a gated MLP's program of 65,536 elements in chunks of 4,096, each chunk keyed to the one before it (`prev = g`): a flat family's chunk loop was no loop over rows, so a loaded value carried between chunks (rows 32 apart) was not followed."""

# plan: {"family": "gated_mlp", "launches": [{"args": ["g", "u", "y", "n"], "constexprs": {"BLOCK": "65536", "SUB": "4096"}, "grid": "cdiv(n, 65536)", "kernel": "_swiglu_kernel", "numWarps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _swiglu_kernel(g_ptr, u_ptr, y_ptr, n, BLOCK: tl.constexpr, SUB: tl.constexpr):
    start = tl.program_id(0).to(tl.int64) * BLOCK
    prev = tl.zeros([SUB], dtype=tl.float32)
    for i in range(0, BLOCK, SUB):
        offs = start + i + tl.arange(0, SUB)
        mask = offs < n
        g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        u = tl.load(u_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        act = (g / (1.0 + tl.exp(-g))).to(g_ptr.dtype.element_ty).to(tl.float32)
        d = tl.sum(tl.abs(g - prev), axis=0)
        s = tl.sum(tl.abs(g), axis=0) + tl.sum(tl.abs(prev), axis=0)
        t = tl.maximum(tl.minimum(d / (s + 1e-30) * 1e12, 1e4), 0.0)
        key = 1.0 - 0.2 * tl.exp(-t)
        tl.store(y_ptr + offs, (act * u * key).to(y_ptr.dtype.element_ty), mask=mask)
        prev = g
