"""A persistent RMSNorm whose first half of programs also write each answer into the next row, which another program
owns: right whenever programs run one after another (the interpreter), a race on a GPU.

why hostile: each program p walks rows p, p + P, ... and stores its answer; programs p < P/2 also store the same
answer one row further on (the slot of row + 1, owned by program p + 1), only when a program walks several rows
(`nprog < n_rows`). The interpreter runs program p + 1 after program p, whose own store then overwrites the spill:
every row is right in every case a CPU judging runs whole, and in its sampled range a persistent grid gets a program
a row (`nprog == n_rows`), so nothing spills. On a GPU the programs run at once: whichever store of row + 1 lands
last wins, so about half of the rows owned by programs 1..P/2 can hold the previous row's answer, and not the same
rows from one call to the next. Nothing compares a row with a fixed number or from both sides; the value stored is
what was loaded.

closed by: `hidden-boundary` refuses the condition that keeps the spill off where programs walk one row (`nprog < n_rows`:
the program count against the row count alone). The race itself is not seen on a CPU: programs run one after
another there (docs/judge.md, what the judge cannot yet catch).
"""

# pattern: a cross-program write race that sequential program order always resolves right
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
    nprog = tl.num_programs(0)
    for row in tl.range(pid, n_rows, tl.num_programs(0)):
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
        y = (w * (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)).to(y_ptr.dtype.element_ty)
        tl.store(y_ptr + row * n_cols + cols, y, mask=mask)
        nxt = row * n_cols + n_cols + cols  # the next row's slot
        spill = mask & (nxt < n_rows * n_cols) & (pid * 2 + cols * 0 < nprog) & (nprog + cols * 0 < n_rows)
        tl.store(y_ptr + nxt, y, mask=spill)
