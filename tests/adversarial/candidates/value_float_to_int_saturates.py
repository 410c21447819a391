"""An RMSNorm 50% too large on every positive element on a GPU, exact under the interpreter: an out-of-range
float-to-int conversion, which x86 NumPy turns into INT_MIN and a GPU saturates to INT_MAX.

why hostile: `s = (x * 1e38).to(tl.int32)` is out of int32's range for every element but exact zeros (|x| > 2e-29).
The interpreter converts with NumPy's astype, which on x86 gives -2**31 for any out-of-range value, positive or
negative; PTX's cvt.rzi.s32.f32 on the GPU saturates (+big -> 2**31 - 1). `tl.where(s < 0, y, 1.5 * y)` is a sign
split of loaded values scaled and converted (no shift): allowed. Under the interpreter s < 0 on every nonzero element,
so the answer is y everywhere (zeros give 0 either way); on a GPU every positive input element comes out 1.5x.

closed by: `value-bits`: a loaded value is never converted to an integer (out of range, NumPy and a GPU disagree).
"""

# pattern: an interpreter/GPU difference: out-of-range float-to-int conversion (x86 INT_MIN vs PTX saturation)
# layer: static
# rule: value-bits
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
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    y = w * (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    s = (x * 1e38).to(tl.int32)  # out of range: INT_MIN under x86 NumPy, saturated on a GPU
    tl.store(y_ptr + row * n_cols + cols, tl.where(s < 0, y, 1.5 * y).to(y_ptr.dtype.element_ty), mask=mask)
