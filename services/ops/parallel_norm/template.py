"""The parallel-norm template (op family "parallel_norm"): a parallel-residual layer's two norms, one pass.

A candidate is data: `render(config)` is the kernel source (only @triton.jit code) and `plan(config)` how to launch
it in the family's vocabulary (services.ops.parallel_norm, whose layer wrapper runs the layer's own attention and
MLP around it). Each row is read once and reduced once; the normalised row is scaled by each norm's weight (and
shifted by its bias) into two outputs, with the arithmetic of the norm template's kernel of the same variant
(services.ops.row_reduction.template), so a layer swapped with it answers as the layer did. The search table and
the launch are the norm template's (`row_configs`, `row_launch`): the same rows, two more operands and an output.
"""

from __future__ import annotations

from services.core.pb import events_pb2 as pb
from services.ops import parallel_norm
from services.ops.row_reduction.template import RowLayerTemplate, row_launch

TEMPLATE = "dual_norm_onepass"
OP_FAMILY = parallel_norm.FAMILY
ENTRYPOINT = parallel_norm.ENTRYPOINT
ENTRY_INPUTS = parallel_norm.ENTRY_INPUTS
VARIANTS = parallel_norm.WRITABLE  # a config always names its variant: what the layer was seen computing
KERNELS = {v: f"_{v}_kernel" for v in VARIANTS}
BIASED = ("dual_layernorm",)


_ROWS = RowLayerTemplate(TEMPLATE, parallel_norm, "input norm, attention, post norm and MLP", VARIANTS)
variant_for, contract_for, valid = _ROWS.variant_for, _ROWS.contract_for, _ROWS.valid
_checked = _ROWS.checked


def search_configs(
    variant: str = "dual_layernorm", width: int = 0, live_shape: tuple[int, ...] = ()
) -> list[pb.TemplateConfig]:
    """The norm template's search space, in its order for this width: the same rows, a second norm each."""
    return _ROWS.search_configs(variant, width)


def render(config: pb.TemplateConfig) -> str:
    """The kernel source of the config's variant (the same for every config of it: the config lives in the plan)."""
    variant = _checked(config).variant
    biased = variant in BIASED
    return (
        _SKELETON.replace("@TEMPLATE@", TEMPLATE)
        .replace("@VARIANT@", variant)
        .replace("@KERNEL@", KERNELS[variant])
        .replace("@BIAS_PARAM@", "    b_ptr,\n" if biased else "")
        .replace("@BIAS2_PARAM@", "    b2_ptr,\n" if biased else "")
        .replace("@LOAD@", _BIAS_LOADS if biased else "")
        .replace("@NORM@", _NORMS[variant])
    )


def plan(config: pb.TemplateConfig) -> pb.LaunchPlan:
    _checked(config)
    biased = config.variant in BIASED
    args = ["x", "w", *(["b"] if biased else []), "w2", *(["b2"] if biased else []), "y", "y2", "rows", "eps"]
    launch = row_launch(KERNELS[config.variant], args, config.num_warps, config.rows_per_program)
    return pb.LaunchPlan(family=OP_FAMILY, launches=[launch])


_BIAS_LOADS = """\
    b = tl.load(b_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    b2 = tl.load(b2_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
"""
# Per variant: the lines that normalise the fp32 row `x` once and scale it into `y` and `y2` (the norm template's
# arithmetic, line for line, with a second weight and bias).
_NORMS = {
    "dual_layernorm": """\
        mean = tl.sum(x, axis=0) / N_COLS
        # the padding past N_COLS must not count in the variance: centre only the real columns
        centred = tl.where(mask, x - mean, 0.0)
        variance = tl.sum(centred * centred, axis=0) / N_COLS
        normed = centred * tl.rsqrt(variance + eps)
        y = normed * w + b
        y2 = normed * w2 + b2
""",
    "dual_rmsnorm": """\
        variance = tl.sum(x * x, axis=0) / N_COLS
        # HF's RMSNorm casts the normalised row back to the input dtype before the weight multiply.
        normed = (x * tl.rsqrt(variance + eps)).to(x_ptr.dtype.element_ty).to(tl.float32)
        y = w * normed
        y2 = w2 * normed
""",
}

_SKELETON = '''\
"""Both norms of a parallel-residual layer from one read of each row (gpuyantra template @TEMPLATE@, variant @VARIANT@).

Each row: loaded once, reduced once in fp32, and the normalised row scaled by the first norm's weight (and bias)
into y and by the second's into y2, each cast once to its output's dtype. The launch plan sets ROWS (rows per
program) and the warps.
"""

import triton
import triton.language as tl


@triton.jit
def @KERNEL@(
    x_ptr,
    w_ptr,
@BIAS_PARAM@    w2_ptr,
@BIAS2_PARAM@    y_ptr,
    y2_ptr,
    n_rows,
    eps,
    N_COLS: tl.constexpr,
    BLOCK: tl.constexpr,
    ROWS: tl.constexpr,
):
    # N_COLS is also the row stride of every operand (the wrapper makes them contiguous).
    first_row = tl.program_id(0) * ROWS
    cols = tl.arange(0, BLOCK)
    col_mask = cols < N_COLS
    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    w2 = tl.load(w2_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
@LOAD@    for r in tl.static_range(ROWS):
        row = first_row + r
        # Rows past the end (the last program of a ragged grid) load and store nothing.
        mask = cols < tl.where(row < n_rows, N_COLS, 0)
        offsets = row * N_COLS + cols
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
@NORM@        tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)
        tl.store(y2_ptr + offsets, y2.to(y2_ptr.dtype.element_ty), mask=mask)
'''
