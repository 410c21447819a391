"""The RMSNorm template (op family "row_reduction"): one pass over each row, kernel → launcher → wrapper.

`render(config)` returns the complete source of a candidate module. The source is what gets
judged, hashed, recorded and hot-swapped, so it must be a pure function of the config: same
config, same bytes.
"""

from __future__ import annotations

from services.core.pb import events_pb2 as pb

TEMPLATE = "row_reduction_onepass"
OP_FAMILY = "row_reduction"
ENTRYPOINT = "rmsnorm_forward"
# The forward inputs the entrypoint takes; the rest of its parameters (weight, eps) are bound.
ENTRY_INPUTS = ("hidden_states",)

# The search space, tried in this order. One row per program with 4 warps comes first: judged on
# the H200 (bf16, 2026-11-29, tests/judge/test_judge_gpu.py) it took 53.0 us at 32768x1536 (~89% of
# the copy ceiling) against eager 663, torch.compile 68.6, F.rms_norm 65.2; 11.4 us at 4096x1536
# (compile 13.5, native 13.9); 1.3 us at 1x1536 in a CUDA graph (eager 12.1). More rows per program
# amortise the weight load for narrow rows, more warps help wide rows. Powers of two (Triton).
NUM_WARPS = (4, 8, 2, 1, 16)
ROWS_PER_PROGRAM = (1, 2, 4)
SEARCH_TABLE: tuple[tuple[int, int], ...] = tuple((w, r) for w in NUM_WARPS for r in ROWS_PER_PROGRAM)


def search_configs() -> list[pb.TemplateConfig]:
    return [pb.TemplateConfig(template=TEMPLATE, num_warps=w, rows_per_program=r) for w, r in SEARCH_TABLE]


def valid(config: pb.TemplateConfig) -> bool:
    def pow2(n: int, most: int) -> bool:
        return 0 < n <= most and n & (n - 1) == 0

    return config.template == TEMPLATE and pow2(config.num_warps, 32) and pow2(config.rows_per_program, 64)


def render(config: pb.TemplateConfig) -> str:
    if not valid(config):
        raise ValueError(
            f"not a {TEMPLATE} config: template={config.template!r} num_warps={config.num_warps} "
            f"rows_per_program={config.rows_per_program} (both must be powers of two)"
        )
    return (
        _SOURCE.replace("@NUM_WARPS@", str(config.num_warps))
        .replace("@ROWS@", str(config.rows_per_program))
        .replace("@TEMPLATE@", TEMPLATE)
    )


_SOURCE = '''\
"""RMSNorm forward as in HF Qwen2RMSNorm/LlamaRMSNorm (gpuyantra template @TEMPLATE@).

Config: num_warps=@NUM_WARPS@, rows per program=@ROWS@.

Casting follows the HF module exactly: x is upcast to fp32, variance = mean(x^2),
x * rsqrt(variance + eps) is cast back to the input dtype, then multiplied by the weight in
the promoted dtype of (weight, input).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

NUM_WARPS = @NUM_WARPS@
ROWS_PER_PROGRAM = @ROWS@
MAX_BLOCK = 65536  # one row must fit one program's registers/shared memory


@triton.jit
def _rmsnorm_fwd_kernel(
    x_ptr,
    w_ptr,
    y_ptr,
    n_rows,
    eps,
    N_COLS: tl.constexpr,
    BLOCK: tl.constexpr,
    ROWS: tl.constexpr,
):
    # N_COLS is also the row stride of both x and y (contiguous, made so by the wrapper). As a
    # constant the compiler sees that a 1000-wide bf16 row starts 16-byte aligned and loads it 8
    # elements at a time; as a runtime int it would only know divisibility by 16 (1000 is not).
    first_row = tl.program_id(0) * ROWS
    cols = tl.arange(0, BLOCK)
    col_mask = cols < N_COLS
    # The weight is loaded once per program and reused for its ROWS rows.
    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    for r in tl.static_range(ROWS):
        row = first_row + r
        # Rows past the end (the last program of a ragged grid) load and store nothing.
        mask = cols < tl.where(row < n_rows, N_COLS, 0)
        x = tl.load(x_ptr + row * N_COLS + cols, mask=mask, other=0.0).to(tl.float32)
        variance = tl.sum(x * x, axis=0) / N_COLS
        normed = x * tl.rsqrt(variance + eps)
        # HF casts the normalised row back to the input dtype before the weight multiply.
        normed = normed.to(x_ptr.dtype.element_ty).to(tl.float32)
        y = w * normed
        tl.store(y_ptr + row * N_COLS + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def _launch(x2d, weight, y2d, eps):
    n_rows, n_cols = x2d.shape
    block = triton.next_power_of_2(n_cols)
    grid = (triton.cdiv(n_rows, ROWS_PER_PROGRAM),)
    _rmsnorm_fwd_kernel[grid](
        x2d,
        weight,
        y2d,
        n_rows,
        eps,
        N_COLS=n_cols,
        BLOCK=block,
        ROWS=ROWS_PER_PROGRAM,
        num_warps=NUM_WARPS,
    )


def rmsnorm_forward(hidden_states, weight, eps):
    if not isinstance(hidden_states, torch.Tensor) or not isinstance(weight, torch.Tensor):
        raise TypeError("rmsnorm_forward takes tensors for hidden_states and weight")
    if weight.dim() != 1 or hidden_states.dim() < 1 or hidden_states.shape[-1] != weight.shape[0]:
        raise ValueError(
            f"hidden_states {tuple(hidden_states.shape)} does not end in the weight width {tuple(weight.shape)}"
        )
    if not hidden_states.dtype.is_floating_point or not weight.dtype.is_floating_point:
        raise TypeError(f"rmsnorm_forward needs floating tensors, got {hidden_states.dtype} and {weight.dtype}")
    if hidden_states.device != weight.device:
        raise ValueError(f"hidden_states on {hidden_states.device} but weight on {weight.device}")
    n_cols = weight.shape[0]
    if triton.next_power_of_2(n_cols) > MAX_BLOCK:
        raise ValueError(f"width {n_cols} is too wide for a one-pass row kernel (at most {MAX_BLOCK})")
    out_dtype = torch.promote_types(weight.dtype, hidden_states.dtype)
    x2d = hidden_states.reshape(-1, n_cols).contiguous()
    y2d = torch.empty(x2d.shape, dtype=out_dtype, device=x2d.device)
    if x2d.shape[0] > 0:
        _launch(x2d, weight.contiguous(), y2d, float(eps))
    return y2d.reshape(hidden_states.shape)
'''
