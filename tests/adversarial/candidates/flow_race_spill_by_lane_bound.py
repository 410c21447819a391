"""A persistent RMSNorm whose first half of programs also write each answer into the next row (another program's),
gated by a lane bound instead of a count comparison: right in any sequential program order, a race on a GPU.

why hostile: programs p < P/2 store their row's answer into row + 1 too, on lanes `cols < n_rows - num_programs`
(a count on the greater side of the block's lanes: the exempt lane-bound shape). In the CPU's sampled range a
persistent grid has a program a row, so the bound is 0 and nothing spills; in its whole cases the interpreter runs
program p + 1 after p, whose own store overwrites the spill. On a GPU the 132 programs run at once and whichever
store of row + 1 lands last wins: rows owned by programs 1..66 can hold the previous row's answer, differently
from call to call.

closed by: `hidden-boundary` refuses the lane bound that keeps the spill off where programs walk one row (`cols < n_rows -
num_programs`); the race itself is not seen on a CPU.
"""

# pattern: a cross-program write race that sequential program order always resolves right (lane-bound gate)
# layer: static
# rule: hidden-boundary
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "rows", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "sms", "kernel": "_rms_persistent_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rms_persistent_kernel(x_ptr, w_ptr, y_ptr, n_rows, n_cols, eps, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    pid = tl.program_id(0)
    for row in tl.range(pid, n_rows, tl.num_programs(0)):
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
        y = (w * (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)).to(y_ptr.dtype.element_ty)
        tl.store(y_ptr + row * n_cols + cols, y, mask=mask)
        nxt = row * n_cols + n_cols + cols  # the next row's slot
        first_half = tl.broadcast_to(pid * 2, (BLOCK,)) < tl.num_programs(0)
        spill = mask & (nxt < n_rows * n_cols) & first_half & (cols < n_rows - tl.num_programs(0))
        tl.store(y_ptr + nxt, y, mask=spill)
