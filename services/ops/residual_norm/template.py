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
from services.ops.decoder_layer import ROLES_SAID
from services.ops.row_reduction import template as rows

TEMPLATE = "add_norm_onepass"
OP_FAMILY = residual_norm.FAMILY
ENTRYPOINT = residual_norm.ENTRYPOINT
ENTRY_INPUTS = residual_norm.ENTRY_INPUTS
VARIANTS = residual_norm.WRITABLE  # a config always names its variant: what the layer was seen computing

_ROWS = rows.RowLayerTemplate(TEMPLATE, residual_norm, ROLES_SAID, VARIANTS)
variant_for, contract_for, valid = _ROWS.variant_for, _ROWS.contract_for, _ROWS.valid
KERNELS = {v: _ROWS.kernel(v) for v in VARIANTS}


def search_configs(
    variant: str = "add_rmsnorm", width: int = 0, live_shape: tuple[int, ...] = ()
) -> list[pb.TemplateConfig]:
    """The norm template's search space, in its order for this width: the same rows, one more operand each."""
    return _ROWS.search_configs(variant, width)


def _pointers(variant: str) -> tuple[str, ...]:
    biased = residual_norm.norm_variant(variant) in row_reduction.BIASED
    return ("x", "r", "w", *(("b",) if biased else ()), "y", "s")


def render(config: pb.TemplateConfig) -> str:
    """The kernel source of the config's variant (the same for every config of it: the config lives in the plan)."""
    variant = _ROWS.checked(config).variant
    state, norm = _NORMS[residual_norm.norm_variant(variant)]
    return _ROWS.source(
        variant,
        f"Residual add fused with the post norm of a decoder layer (gpuyantra template {TEMPLATE}, variant {variant})."
        "\n\nEach row: s = a + x (the attention output and the residual) in fp32, rounded once to the dtype as "
        "torch's\nadd rounds it, and stored; then the rounded sum is normalised as the layer's post norm does and "
        "stored.\nThe launch plan sets ROWS (rows per program) and the warps.",
        _pointers(variant),
        state,
        _SUM + norm + "        tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)\n",
    )


def plan(config: pb.TemplateConfig) -> pb.LaunchPlan:
    return _ROWS.launch_plan(config, _pointers(config.variant))


# Each row: the attention output and the residual read, their sum rounded to the dtype, stored, and normalised.
_SUM = """\
        offsets = row * N_COLS + cols
        a = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        res = tl.load(r_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        summed = (a + res).to(s_ptr.dtype.element_ty)
        tl.store(s_ptr + offsets, summed, mask=mask)
        x = summed.to(tl.float32)
"""
# Per norm variant: what is loaded once per program (the weight, its offset, the bias), and the lines that
# normalise the fp32 row `x` (the rounded sum) into `y` — the norm template's arithmetic, line for line.
_NORMS = {
    "rmsnorm": (
        rows.loads("w"),
        rows.RMS_VARIANCE
        + """\
        # HF casts the normalised row back to the input dtype before the weight multiply.
        normed = (x * tl.rsqrt(variance + eps)).to(s_ptr.dtype.element_ty).to(tl.float32)
        y = w * normed
""",
    ),
    "rmsnorm_fp32_weight": (
        rows.loads("w"),
        rows.RMS_VARIANCE
        + """\
        # OLMo2's: the weight applied in fp32, one rounding at the end
        y = w * (x * tl.rsqrt(variance + eps))
""",
    ),
    "rmsnorm_offset": (
        "    scale = 1.0 + tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)\n",
        rows.RMS_VARIANCE + "        y = x * tl.rsqrt(variance + eps) * scale\n",
    ),
    "layernorm_no_bias": (rows.loads("w"), rows.centred() + "        y = centred * tl.rsqrt(variance + eps) * w\n"),
    "layernorm": (rows.loads("w", "b"), rows.centred() + "        y = centred * tl.rsqrt(variance + eps) * w + b\n"),
    # Nemotron's LayerNorm1P: 1 + weight formed in the weight's dtype, as the module forms it
    "layernorm_offset": (
        rows.loads("w") + "    w = (w + 1.0).to(w_ptr.dtype.element_ty).to(tl.float32)\n" + rows.loads("b"),
        rows.centred() + "        y = centred * tl.rsqrt(variance + eps) * w + b\n",
    ),
}
