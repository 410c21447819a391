"""Does the maths in fp16 for an fp32 model: faster on paper, wrong in the fourth digit.

why hostile: half the bytes and faster maths; a harness with a loose (bf16-sized) tolerance for every
dtype passes it. The judge's bound comes from the dtypes involved: fp32 in, fp32 out.
"""

# pattern: precision downgrade inside the kernel
# layer: correctness
# rule: outside-tolerance
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "kernel": "_rms_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float16)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float16)
    x32 = x.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x32 * x32, axis=0) / n_cols + eps).to(tl.float16)
    y = w * (x * rstd)
    tl.store(y_ptr + row * n_cols + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
