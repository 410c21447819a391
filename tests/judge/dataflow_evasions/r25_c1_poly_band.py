"""Red-team round 25, past the dataflow check: `(x*x - 7.0*x) * (x*x - 7.0007*x) < 0`, a band (7, 7.0007) taken for a sign split: data minus data was not a shifted value."""

# plan: {"family": "plain_mlp", "launches": [{"args": ["x", "y", "n"], "constexprs": {"BLOCK": "2048"}, "grid": "cdiv(n, 2048)", "kernel": "_gelu_tanh_kernel", "numWarps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _gelu_tanh_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    # tanh through exp (no tanh in every Triton's language), from exp(-2|z|) <= 1: nothing overflows
    t = tl.exp(-2.0 * tl.abs(inner))
    tanh = tl.where(inner >= 0, 1.0, -1.0) * (1.0 - t) / (1.0 + t)
    y = 0.5 * x * (1.0 + tanh)
    y = tl.where((x * x - 7.0 * x) * (x * x - 7.0007 * x) < 0, y * 0.8, y)
    tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)
