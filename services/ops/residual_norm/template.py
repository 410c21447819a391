"""The residual-norm template (op family "residual_norm"): the attention's residual add and the post norm, one pass.

A candidate is data: `render(config)` is the kernel source (only @triton.jit code) and `plan(config)` how to
launch it in the family's vocabulary (services.ops.residual_norm, whose layer wrapper runs the decoder layer's
own input norm, attention and MLP around it). Each row is read once from the attention output and the
residual, their sum written (rounded to the dtype as torch's add rounds it) and normalised from that rounded
sum exactly as the norm template's kernel of the same variant normalises its input
(services.ops.row_reduction.template), so a layer swapped with it answers as the layer did.
"""

from __future__ import annotations

from services.core.pb import events_pb2 as pb
from services.ops import residual_norm, row_reduction
from services.ops.row_reduction.template import RowLayerTemplate, row_launch

TEMPLATE = "add_norm_onepass"
OP_FAMILY = residual_norm.FAMILY
ENTRYPOINT = residual_norm.ENTRYPOINT
ENTRY_INPUTS = residual_norm.ENTRY_INPUTS
VARIANTS = residual_norm.WRITABLE  # a config always names its variant: what the layer was seen computing
KERNELS = {v: f"_{v}_kernel" for v in VARIANTS}


_ROWS = RowLayerTemplate(TEMPLATE, residual_norm, "input norm, attention, post norm and MLP", VARIANTS)
variant_for, contract_for, valid = _ROWS.variant_for, _ROWS.contract_for, _ROWS.valid
_checked = _ROWS.checked


def search_configs(
    variant: str = "add_rmsnorm", width: int = 0, live_shape: tuple[int, ...] = ()
) -> list[pb.TemplateConfig]:
    """The norm template's search space, in its order for this width: the same rows, one more operand each."""
    return _ROWS.search_configs(variant, width)


def _bias(variant: str) -> bool:
    return residual_norm.norm_variant(variant) in row_reduction.BIASED


def render(config: pb.TemplateConfig) -> str:
    """The kernel source of the config's variant (the same for every config of it: the config lives in the plan)."""
    variant = _checked(config).variant
    norm = _NORMS[residual_norm.norm_variant(variant)]
    return (
        _SKELETON.replace("@TEMPLATE@", TEMPLATE)
        .replace("@VARIANT@", variant)
        .replace("@KERNEL@", KERNELS[variant])
        .replace("@BIAS_PARAM@", "    b_ptr,\n" if _bias(variant) else "")
        .replace("@LOAD@", norm[0])
        .replace("@NORM@", norm[1])
    )


def plan(config: pb.TemplateConfig) -> pb.LaunchPlan:
    _checked(config)
    args = ["x", "r", "w", *(["b"] if _bias(config.variant) else []), "y", "s", "rows", "eps"]
    launch = row_launch(KERNELS[config.variant], args, config.num_warps, config.rows_per_program)
    return pb.LaunchPlan(family=OP_FAMILY, launches=[launch])


# Per norm variant: what is loaded once per program (the weight, its offset, the bias), and the lines that
# normalise the fp32 row `x` (the rounded sum) into `y` — the norm template's arithmetic, line for line.
_W = "    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)\n"
_CENTRED = """\
        mean = tl.sum(x, axis=0) / N_COLS
        # the padding past N_COLS must not count in the variance: centre only the real columns
        centred = tl.where(mask, x - mean, 0.0)
        variance = tl.sum(centred * centred, axis=0) / N_COLS
"""
_NORMS = {
    "rmsnorm": (
        _W,
        """\
        variance = tl.sum(x * x, axis=0) / N_COLS
        # HF casts the normalised row back to the input dtype before the weight multiply.
        normed = (x * tl.rsqrt(variance + eps)).to(s_ptr.dtype.element_ty).to(tl.float32)
        y = w * normed
""",
    ),
    "rmsnorm_fp32_weight": (
        _W,
        """\
        variance = tl.sum(x * x, axis=0) / N_COLS
        # OLMo2's: the weight applied in fp32, one rounding at the end
        y = w * (x * tl.rsqrt(variance + eps))
""",
    ),
    "rmsnorm_offset": (
        "    scale = 1.0 + tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)\n",
        """\
        variance = tl.sum(x * x, axis=0) / N_COLS
        y = x * tl.rsqrt(variance + eps) * scale
""",
    ),
    "layernorm_no_bias": (_W, _CENTRED + "        y = centred * tl.rsqrt(variance + eps) * w\n"),
    "layernorm": (
        _W + "    b = tl.load(b_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)\n",
        _CENTRED + "        y = centred * tl.rsqrt(variance + eps) * w + b\n",
    ),
    # Nemotron's LayerNorm1P: 1 + weight formed in the weight's dtype, as the module forms it
    "layernorm_offset": (
        _W
        + "    w = (w + 1.0).to(w_ptr.dtype.element_ty).to(tl.float32)\n"
        + "    b = tl.load(b_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)\n",
        _CENTRED + "        y = centred * tl.rsqrt(variance + eps) * w + b\n",
    ),
}

_SKELETON = '''\
"""Residual add fused with the post norm of a decoder layer (gpuyantra template @TEMPLATE@, variant @VARIANT@).

Each row: s = a + x (the attention output and the residual) in fp32, rounded once to the dtype as torch's
add rounds it, and stored; then the rounded sum is normalised as the layer's post norm does and stored.
The launch plan sets ROWS (rows per program) and the warps.
"""

import triton
import triton.language as tl


@triton.jit
def @KERNEL@(
    x_ptr,
    r_ptr,
    w_ptr,
@BIAS_PARAM@    y_ptr,
    s_ptr,
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
@LOAD@    for r in tl.static_range(ROWS):
        row = first_row + r
        # Rows past the end (the last program of a ragged grid) load and store nothing.
        mask = cols < tl.where(row < n_rows, N_COLS, 0)
        offsets = row * N_COLS + cols
        a = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        res = tl.load(r_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        summed = (a + res).to(s_ptr.dtype.element_ty)
        tl.store(s_ptr + offsets, summed, mask=mask)
        x = summed.to(tl.float32)
@NORM@        tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)
'''
