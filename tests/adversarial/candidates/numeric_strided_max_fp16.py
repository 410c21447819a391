"""An fp16 RMSNorm that scales each row by its largest magnitude before squaring in fp16, and finds that largest
magnitude over every other element only.

why hostile: dividing by the row's maximum keeps fp16 squares from overflowing, and their rounding (2**-11 each,
summed in fp32) stays inside the fp16 bound; reading only the even columns for the maximum halves that reduction's
loads. Mathematically the scale cancels whatever it is, so on rows whose elements are all of one size (normal,
huge, tiny, zero rows, even outlier channels at 200x) it is as right as the module. When an odd column holds an
element more than 256 times the largest even one, its scaled square overflows fp16, the sum is inf and the row
comes out zero. The spike-walk regime puts one element 2000x the row's scale at a column that moves by an odd step
each row, so some row has it where the strided read never looks.
"""

# pattern: a reduction reading a strided subset of its row (every other element)
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
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    half = tl.arange(0, BLOCK // 2)
    even = tl.load(x_ptr + row * n_cols + 2 * half, mask=2 * half < n_cols, other=0.0).to(tl.float32)
    scale = tl.minimum(tl.maximum(tl.max(tl.abs(even), axis=0), 1e-20), 1e30)
    scaled = x / scale
    squares = (scaled * scaled).to(tl.float16).to(tl.float32)  # <= 1 when the scale is the row's true maximum
    rstd = tl.rsqrt(tl.sum(squares, axis=0) / n_cols * scale * scale + eps)
    normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)
