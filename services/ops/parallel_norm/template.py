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
from services.ops.decoder_layer import ROLES_SAID
from services.ops.row_reduction import template as rows

TEMPLATE = "dual_norm_onepass"
OP_FAMILY = parallel_norm.FAMILY
ENTRYPOINT = parallel_norm.ENTRYPOINT
ENTRY_INPUTS = parallel_norm.ENTRY_INPUTS
VARIANTS = parallel_norm.WRITABLE  # a config always names its variant: what the layer was seen computing
BIASED = ("dual_layernorm",)

_ROWS = rows.RowLayerTemplate(TEMPLATE, parallel_norm, ROLES_SAID, VARIANTS)
variant_for, contract_for, valid = _ROWS.variant_for, _ROWS.contract_for, _ROWS.valid
KERNELS = {v: _ROWS.kernel(v) for v in VARIANTS}


def search_configs(
    variant: str = "dual_layernorm", width: int = 0, live_shape: tuple[int, ...] = ()
) -> list[pb.TemplateConfig]:
    """The norm template's search space, in its order for this width: the same rows, a second norm each."""
    return _ROWS.search_configs(variant, width)


def _pointers(variant: str) -> tuple[str, ...]:
    biased = variant in BIASED
    return ("x", "w", *(("b",) if biased else ()), "w2", *(("b2",) if biased else ()), "y", "y2")


def render(config: pb.TemplateConfig) -> str:
    """The kernel source of the config's variant (the same for every config of it: the config lives in the plan)."""
    variant = _ROWS.checked(config).variant
    return _ROWS.source(
        variant,
        "Both norms of a parallel-residual layer from one read of each row (gpuyantra template "
        f"{TEMPLATE}, variant {variant}).\n\nEach row: loaded once, reduced once in fp32, and the normalised row "
        "scaled by the first norm's weight (and bias)\ninto y and by the second's into y2, each cast once to its "
        "output's dtype. The launch plan sets ROWS (rows per\nprogram) and the warps.",
        _pointers(variant),
        rows.loads("w", "w2") + (rows.loads("b", "b2") if variant in BIASED else ""),
        "        offsets = row * N_COLS + cols\n"
        "        x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)\n"
        + _NORMS[variant]
        + "        tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)\n"
        "        tl.store(y2_ptr + offsets, y2.to(y2_ptr.dtype.element_ty), mask=mask)\n",
    )


def plan(config: pb.TemplateConfig) -> pb.LaunchPlan:
    return _ROWS.launch_plan(config, _pointers(config.variant))


# Per variant: the lines that normalise the fp32 row `x` once and scale it into `y` and `y2` (the norm template's
# arithmetic, line for line, with a second weight and bias).
_NORMS = {
    "dual_layernorm": rows.centred()
    + """\
        normed = centred * tl.rsqrt(variance + eps)
        y = normed * w + b
        y2 = normed * w2 + b2
""",
    "dual_rmsnorm": rows.RMS_VARIANCE
    + """\
        # HF's RMSNorm casts the normalised row back to the input dtype before the weight multiply.
        normed = (x * tl.rsqrt(variance + eps)).to(x_ptr.dtype.element_ty).to(tl.float32)
        y = w * normed
        y2 = w2 * normed
""",
}
