"""Residual add + RMSNorm in two passes over column chunks, the sum recomputed in the second pass (the red team's honest style of round 25; reloading the stored sum instead reads an output and is refused by design)."""

# plan: {"family": "residual_norm", "launches": [{"args": ["x", "r", "w", "y", "s", "rows", "cols", "eps", "x_row_stride", "y_row_stride"], "constexprs": {"BLOCK": "256"}, "grid": "rows", "kernel": "add_rms_kernel", "numWarps": 4}]}
import triton
import triton.language as tl


@triton.jit
def add_rms_kernel(
    x_ptr, r_ptr, w_ptr, y_ptr, s_ptr, n_rows, n_cols, eps, x_row_stride, y_row_stride, BLOCK: tl.constexpr
):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        m = cols < n_cols
        a = tl.load(x_ptr + row * x_row_stride + cols, mask=m, other=0.0).to(tl.float32)
        b = tl.load(r_ptr + row * x_row_stride + cols, mask=m, other=0.0).to(tl.float32)
        s = (a + b).to(s_ptr.dtype.element_ty)
        tl.store(s_ptr + row * y_row_stride + cols, s, mask=m)
        sf = s.to(tl.float32)
        acc += sf * sf
    rstd = tl.rsqrt(tl.sum(acc, axis=0) / n_cols + eps)
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        m = cols < n_cols
        a = tl.load(x_ptr + row * x_row_stride + cols, mask=m, other=0.0).to(tl.float32)
        b = tl.load(r_ptr + row * x_row_stride + cols, mask=m, other=0.0).to(tl.float32)
        s = (a + b).to(s_ptr.dtype.element_ty).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=m, other=0.0).to(tl.float32)
        normed = (s * rstd).to(s_ptr.dtype.element_ty).to(tl.float32)
        tl.store(y_ptr + row * y_row_stride + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=m)
