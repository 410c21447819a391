"""The RMSNorm template (op family "row_reduction"): one pass over each row.

A candidate is data: `render(config)` is the kernel source (only @triton.jit code) and
`plan(config)` how to launch it (warps, rows per program, grid) in the family's vocabulary
(services.ops.row_reduction, whose wrapper allocates, launches and returns). Both are pure
functions of the config: same config, same bytes.

Its six kernel sources (one a variant) are written in the row frame (`row_kernel`) that the row-plan layer
templates (the residual norm's, the parallel norm's) write theirs in: the signature's tail, the program's rows and
their masks in one place, each variant's state and arithmetic beside it.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.core.pb import events_pb2 as pb
from services.ops import ContractRefused, row_reduction
from services.ops.layer_template import LayerTemplate
from services.ops.row_reduction.contract import ContractError, derive_contract

TEMPLATE = "row_reduction_onepass"
OP_FAMILY = row_reduction.FAMILY
ENTRYPOINT = row_reduction.ENTRYPOINT
# The forward inputs the wrapper takes; the rest of its parameters (weight, eps) are bound.
ENTRY_INPUTS = row_reduction.ENTRY_INPUTS
KERNEL = "_rmsnorm_fwd_kernel"
# What the kernel computes (services.ops.recognise_norm): "" is the HF Llama/Qwen RMSNorm; "rmsnorm_offset"
# is Gemma's, x·rsqrt(mean(x²)+eps)·(1 + weight) in fp32, cast once at the end; "layernorm_no_bias" is
# Cohere's, (x − mean)·rsqrt(var+eps)·weight in fp32, cast once (same wrapper: weight and eps bound);
# "layernorm" is torch.nn.LayerNorm's (GPT-2, BERT-style encoders): the same plus the bias, in fp32, cast once;
# "rmsnorm_fp32_weight" is OLMo2's RMSNorm: the weight applied to the fp32 normalised row, cast once;
# "layernorm_offset" is Nemotron's LayerNorm1P: torch's LayerNorm of (1 + weight), formed in the weight's dtype.
# A config names its variant only when it is not the first, so configs (and candidates) of plain RMSNorm
# are what they always were.
VARIANTS = ("", "rmsnorm_offset", "layernorm_no_bias", "layernorm", "rmsnorm_fp32_weight", "layernorm_offset")
KERNELS = {
    "": KERNEL,
    "rmsnorm_offset": "_rmsnorm_offset_fwd_kernel",
    "layernorm_no_bias": "_layernorm_fwd_kernel",
    "layernorm": "_layernorm_bias_fwd_kernel",
    "rmsnorm_fp32_weight": "_rmsnorm_fp32_weight_fwd_kernel",
    "layernorm_offset": "_layernorm_offset_fwd_kernel",
}
# the biased variants' arguments; the others take _ARGS
ARGS = {v: ["x", "w", "b", "y", "rows", "eps"] for v in row_reduction.BIASED}
_ARGS = ["x", "w", "y", "rows", "eps"]


def variant_for(computes: str) -> str | None:
    """The config variant that writes what a module was seen computing; None when this template cannot."""
    if computes in ("", "rmsnorm"):
        return ""
    return computes if computes in VARIANTS else None


def contract_for(intro: pb.ModuleIntrospection, profile: pb.ModuleClassProfile) -> pb.Contract:
    """The module-class contract: the norm's weight, epsilon (and bias) bound by the attributes it has."""
    try:
        return derive_contract(intro)
    except ContractError as exc:  # the reason recorded in TargetConcluded: replay re-derives it, word for word
        raise ContractRefused(f"the module does not fit the template: {exc}") from None


# The search space, tried in this order. One row per program with 4 warps comes first: judged on
# the H200 (bf16, 2026-11-29, tests/judge/test_judge_gpu.py) it took 53.0 us at 32768x1536 (~89% of
# the copy ceiling) against eager 663, torch.compile 68.6, F.rms_norm 65.2; 11.4 us at 4096x1536
# (compile 13.5, native 13.9); 1.3 us at 1x1536 in a CUDA graph (eager 12.1). More rows per program
# amortise the weight load for narrow rows, more warps help wide rows. Powers of two (Triton).
NUM_WARPS = (4, 8, 2, 1, 16)
ROWS_PER_PROGRAM = (1, 2, 4)
SEARCH_TABLE: tuple[tuple[int, int], ...] = tuple((w, r) for w in NUM_WARPS for r in ROWS_PER_PROGRAM)
# Narrow rows (at most NARROW_WIDTH columns) leave most of 4 warps idle (a 64-wide fp32 row is half an
# element per thread of 128) and rows per program serialise work a wider grid would spread: timed on the H200
# at width 64 in fp32 (`python bench/rmsnorm.py --narrow`, 1-4096 rows, GPU time by graph replay), one warp
# and one or two rows came first by geomean (1.80 and 1.82 us; 4 warps, 1 row 1.92; every 4-row config last,
# 2.28-3.21). The wide table's first (4 warps, 1 row) is third here; the table below is that measured order.
NARROW_WIDTH = 256
NARROW_TABLE: tuple[tuple[int, int], ...] = (
    (1, 1), (1, 2), (4, 1), (8, 1), (2, 2), (2, 1), (4, 2), (16, 1), (8, 2), (1, 4), (16, 2), (2, 4), (4, 4),
    (8, 4), (16, 4),
)  # fmt: skip


def row_configs(template: str, variant: str, width: int) -> list[pb.TemplateConfig]:
    """A row template's search space (this one's, the residual norm's) in the order it is tried; `width` (the live
    row width, 0 unknown) picks the order."""
    table = NARROW_TABLE if 0 < width <= NARROW_WIDTH else SEARCH_TABLE
    return [pb.TemplateConfig(template=template, num_warps=w, rows_per_program=r, variant=variant) for w, r in table]


# A dispatch by row count (the norm template's): calls of at most `dispatch_rows` rows launch with their own warps
# and rows per program, the rest with the config's. Decode-sized calls (1-64 rows) and prefill-sized ones want
# different launch shapes (the H200 benchmarks: a 1-row LayerNorm of 1,536 fastest with 8 warps, 4,096 rows with 2),
# and one candidate serves both; the coder proposes one when its verdicts show two configs each best at one side
# (services.coder.domain.dispatch_config). The judge draws both sides of the boundary (services.judge.cases).
DISPATCH_PARAMS = ("dispatch_rows", "small_warps", "small_rows")
DISPATCH_ROWS = 64
# A persistent grid (the norm template's `persistent` = 1): at most one program per SM, each walking the rows ROWS
# at a time, strided by the grid, the weight loaded once for all of them. Where a call has fewer row blocks than
# SMs it is the plain grid; beyond, it trades launching a program per row block for a loop in each. Tried after
# the plain configs (PERSISTENT_TABLE, appended to the search).
PERSISTENT = "persistent"
PERSISTENT_TABLE: tuple[tuple[int, int], ...] = ((16, 1), (32, 1), (8, 2), (16, 2))


def _pow2(n: int, most: int) -> bool:
    return 0 < n <= most and n & (n - 1) == 0


def row_config_problem(config: pb.TemplateConfig, template: str, variants, dispatch: bool = False) -> str:
    """Why `config` is not one of a row template's ("" when it is): warps and rows powers of two, a known variant,
    and (where the template dispatches by row count and has a persistent grid) a dispatch's limit, warps and rows,
    or `persistent` = 1, or no params at all."""
    fits = config.template == template and config.variant in variants
    params = dict(config.params)
    if params and (not dispatch or sorted(params) not in (sorted(DISPATCH_PARAMS), [PERSISTENT])):
        fits = False
    elif PERSISTENT in params:
        fits = fits and params[PERSISTENT] == 1
    elif params:
        limit, warps, rows = (params[k] for k in DISPATCH_PARAMS)
        fits = fits and _pow2(limit, row_reduction.MAX_DISPATCH_ROWS) and _pow2(warps, 32) and _pow2(rows, 64)
    if fits and _pow2(config.num_warps, 32) and _pow2(config.rows_per_program, 64):
        return ""
    return (
        f"not a {template} config: template={config.template!r} num_warps={config.num_warps} "
        f"rows_per_program={config.rows_per_program} variant={config.variant!r} params={params} (warps and rows "
        f"must be powers of two; variants: {tuple(variants)}; params: "
        f"{'none, ' + ', '.join(DISPATCH_PARAMS) + ' (powers of two), or persistent=1' if dispatch else 'none'})"
    )


@dataclass(frozen=True)
class RowLayerTemplate(LayerTemplate):
    """A layer family's template on this family's row plan (the residual norm's, the parallel norm's): its search
    space and its config check are this template's, under its own name and variants; one kernel a variant,
    `_<variant>_kernel`, written in the row frame (`row_kernel`, every operand a row of N_COLS) and launched once."""

    def search_configs(self, variant: str, width: int) -> list[pb.TemplateConfig]:
        return row_configs(self.name, variant, width)

    def problem(self, config: pb.TemplateConfig) -> str:
        return row_config_problem(config, self.name, self.variants)

    def kernel(self, variant: str) -> str:
        return f"_{variant}_kernel"

    def source(self, variant: str, doc: str, pointers, state: str, body: str) -> str:
        """The variant's kernel source in the row frame (see `row_kernel`)."""
        return row_kernel(doc, self.kernel(variant), pointers, state, body, note=FRAME_NOTE, ragged=RAGGED_NOTE)

    def launch_plan(self, config: pb.TemplateConfig, pointers) -> pb.LaunchPlan:
        """The config's plan: its variant's kernel, taking the `pointers` (its `source`'s), the rows and eps,
        launched once over the rows."""
        args = [*pointers, "rows", "eps"]
        launch = row_launch(self.kernel(self.checked(config).variant), args, config.num_warps, config.rows_per_program)
        return pb.LaunchPlan(family=self.op.FAMILY, launches=[launch])


def row_launch(
    kernel: str, args: list[str], num_warps: int, rows: int, max_rows: int = 0, persistent: bool = False
) -> pb.KernelLaunch:
    """One launch of a row template's kernel: `rows` rows a program (a persistent grid's: at a time), calls of at
    most `max_rows` rows (0: any)."""
    grid = "rows" if rows == 1 else f"cdiv(rows, {rows})"
    return pb.KernelLaunch(
        kernel=kernel,
        args=args,
        constexprs={"N_COLS": "cols", "BLOCK": "block_cols", "ROWS": str(rows)},
        grid=f"min(sms, cdiv(rows, {rows}))" if persistent else grid,
        num_warps=num_warps,
        max_rows=max_rows,
    )


def combine(small: pb.TemplateConfig, large: pb.TemplateConfig, limit: int = DISPATCH_ROWS) -> pb.TemplateConfig:
    """One config dispatching by row count: `small`'s launch shape for calls of at most `limit` rows, `large`'s
    beyond (both plain configs of this template and one variant)."""
    config = pb.TemplateConfig(
        template=TEMPLATE, num_warps=large.num_warps, rows_per_program=large.rows_per_program, variant=large.variant
    )
    config.params.update(dispatch_rows=limit, small_warps=small.num_warps, small_rows=small.rows_per_program)
    return _checked(config)


def search_configs(variant: str = "", width: int = 0, live_shape: tuple[int, ...] = ()) -> list[pb.TemplateConfig]:
    """The search space in the order it is tried; `width` (the live row width, 0 unknown) picks the order. The
    persistent grids come last."""
    persistent = [pb.TemplateConfig(template=TEMPLATE, num_warps=w, rows_per_program=r, variant=variant)
                  for w, r in PERSISTENT_TABLE]  # fmt: skip
    for config in persistent:
        config.params[PERSISTENT] = 1
    return row_configs(TEMPLATE, variant, width) + persistent


def valid(config: pb.TemplateConfig) -> bool:
    return not row_config_problem(config, TEMPLATE, VARIANTS, dispatch=True)


def _checked(config: pb.TemplateConfig) -> pb.TemplateConfig:
    problem = row_config_problem(config, TEMPLATE, VARIANTS, dispatch=True)
    if problem:
        raise ValueError(problem)
    return config


def render(config: pb.TemplateConfig) -> str:
    """The kernel source: one per variant, the same for every config of it (the config lives in the plan)."""
    source = _SOURCES[_checked(config).variant].replace("@TEMPLATE@", TEMPLATE)
    return _persistent(source) if config.params.get(PERSISTENT) else source


def plan(config: pb.TemplateConfig) -> pb.LaunchPlan:
    kernel, args = KERNELS[_checked(config).variant], ARGS.get(config.variant, _ARGS)
    persistent = bool(config.params.get(PERSISTENT))
    launches = [row_launch(kernel, args, config.num_warps, config.rows_per_program, persistent=persistent)]
    if (
        config.params and not persistent
    ):  # a dispatch: short calls first, up to the limit; the config's own serves the rest
        small = row_launch(kernel, args, config.params["small_warps"], config.params["small_rows"],
                           max_rows=config.params["dispatch_rows"])  # fmt: skip
        launches.insert(0, small)
    return pb.LaunchPlan(family=OP_FAMILY, launches=launches)


# ---------------------------------------------------------------- the kernel frame every row template writes in
# (this one's, the residual norm's, the parallel norm's): a program loads its per-column state once and walks ROWS
# rows, each masked past N_COLS and past the last row; a template says the rest, line for line.

FRAME_NOTE = "    # N_COLS is also the row stride of every operand (the wrapper makes them contiguous).\n"
RAGGED_NOTE = "        # Rows past the end (the last program of a ragged grid) load and store nothing.\n"
RMS_VARIANCE = "        variance = tl.sum(x * x, axis=0) / N_COLS\n"
CENTRE_NOTE = "        # the padding past N_COLS must not count in the variance: centre only the real columns\n"


def loads(*names: str) -> str:
    """Per-column state loaded once per program, in fp32: `w = tl.load(w_ptr + cols, ...)` for each name."""
    return "".join(f"    {n} = tl.load({n}_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)\n" for n in names)


def centred(note: bool = True) -> str:
    """The row `x` centred on its mean over the real columns, and its (biased) variance."""
    return (
        "        mean = tl.sum(x, axis=0) / N_COLS\n" + (CENTRE_NOTE if note else "") +
        "        centred = tl.where(mask, x - mean, 0.0)\n"
        "        variance = tl.sum(centred * centred, axis=0) / N_COLS\n"
    )  # fmt: skip


def row_kernel(doc: str, kernel: str, pointers, state: str, body: str, note: str = "", ragged: str = "") -> str:
    """A row template's kernel source: docstring `doc`; `kernel` taking the `pointers` (names less `_ptr`), the
    rows, eps and the constexprs N_COLS, BLOCK, ROWS; `note` (comment lines) before the program's first row, its
    per-column `state` loaded (`loads`), then for each of its ROWS rows the `ragged` note, the row's mask and `body`."""
    params = "".join(f"    {p}_ptr,\n" for p in pointers)
    return (
        f'"""{doc}\n"""\n\nimport triton\nimport triton.language as tl\n\n\n@triton.jit\ndef {kernel}(\n{params}'
        "    n_rows,\n    eps,\n    N_COLS: tl.constexpr,\n    BLOCK: tl.constexpr,\n    ROWS: tl.constexpr,\n):\n"
        f"{note}    first_row = tl.program_id(0) * ROWS\n    cols = tl.arange(0, BLOCK)\n    col_mask = cols < N_COLS\n"
        f"{state}    for r in tl.static_range(ROWS):\n        row = first_row + r\n{ragged}"
        f"        mask = cols < tl.where(row < n_rows, N_COLS, 0)\n{body}"
    )


# This template's kernels, one a variant, each complete source a candidate's text (render() above): its docstring, up
# to the plan's note; its per-column state; how it normalises the fp32 row `x` into `y`; its comments on the frame.
_PLAN_NOTE = "The launch plan sets ROWS (rows per program) and the warps."
_HF_CAST = """\
        # HF casts the normalised row back to the input dtype before the weight multiply.
        normed = normed.to(x_ptr.dtype.element_ty).to(tl.float32)
"""
_RMS_DOC = "Casting follows the HF module exactly: x is upcast to fp32, variance = mean(x^2)"
_LAYERNORM_DOC = "x is upcast to fp32, centred on its mean, divided by sqrt(var + eps) (the biased variance),\n"
_W_NOTE = "    # The weight is loaded once per program and reused for its ROWS rows.\n"
_WB_NOTE = "    # weight and bias loaded once per program and reused for its ROWS rows\n"
_LLAMA_NOTES = {
    "note": """\
    # N_COLS is also the row stride of both x and y (the wrapper makes them contiguous). As a
    # constant the compiler sees that a 1000-wide bf16 row starts 16-byte aligned and loads it 8
    # elements at a time; as a runtime int it would only know divisibility by 16 (1000 is not).
""",
    "ragged": RAGGED_NOTE,
}
_AFFINE = "        y = centred * tl.rsqrt(variance + eps) * w + b\n"
_KERNEL_TEXT = {
    "": (
        "RMSNorm forward as in HF Qwen2RMSNorm/LlamaRMSNorm (gpuyantra template @TEMPLATE@).\n\n" + _RMS_DOC
        + ",\nx * rsqrt(variance + eps) is cast back to the input dtype, then multiplied by the weight in\n"
        "the promoted dtype of (weight, input). ",
        _W_NOTE + loads("w"),
        RMS_VARIANCE + "        normed = x * tl.rsqrt(variance + eps)\n" + _HF_CAST + "        y = w * normed\n",
        _LLAMA_NOTES,
    ),
    "rmsnorm_offset": (
        "RMSNorm forward as in HF GemmaRMSNorm (gpuyantra template @TEMPLATE@, variant rmsnorm_offset).\n\n"
        + _RMS_DOC + ", and\nx * rsqrt(variance + eps) * (1 + weight) is computed in fp32 and cast to the input "
        "dtype once.\n",
        "    # (1 + weight) in fp32, loaded once per program and reused for its ROWS rows.\n"
        "    scale = 1.0 + tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)\n",
        RMS_VARIANCE + "        y = x * tl.rsqrt(variance + eps) * scale\n",
        {},
    ),
    "layernorm_no_bias": (
        "LayerNorm without bias as in HF CohereLayerNorm (gpuyantra template @TEMPLATE@, variant layernorm_no_bias)."
        "\n\nCasting follows the HF module exactly: x is upcast to fp32, centred on its mean, divided by\n"
        "sqrt(var + eps), multiplied by the fp32 weight and cast to the input dtype once.\n",
        loads("w"),
        centred() + "        y = centred * tl.rsqrt(variance + eps) * w\n",
        {},
    ),
    "layernorm": (
        "LayerNorm as torch.nn.LayerNorm computes it (gpuyantra template @TEMPLATE@, variant layernorm).\n\n"
        + _LAYERNORM_DOC + "multiplied by the weight and shifted by the bias in fp32, and cast to the output dtype "
        "once.\n",
        _WB_NOTE + loads("w", "b"),
        centred(note=False) + _AFFINE,
        {},
    ),
    # OLMo2's RMSNorm is Llama's kernel but for where it rounds: the weight applied to the fp32 row, one cast.
    "rmsnorm_fp32_weight": (
        "RMSNorm forward as in HF Olmo2RMSNorm (gpuyantra template @TEMPLATE@, variant rmsnorm_fp32_weight).\n\n"
        + _RMS_DOC + ",\nweight * (x * rsqrt(variance + eps)) is computed in fp32 and cast to the input dtype\n"
        "once (Llama's casts the normalised row first). ",
        _W_NOTE + loads("w"),
        RMS_VARIANCE + "        normed = x * tl.rsqrt(variance + eps)\n        y = w * normed\n",
        _LLAMA_NOTES,
    ),
    # Nemotron's LayerNorm1P: torch's LayerNorm kernel with the weight as the module forms it, 1 + weight rounded to
    # its dtype
    "layernorm_offset": (
        "LayerNorm1P as Nemotron computes it (gpuyantra template @TEMPLATE@, variant layernorm_offset).\n\n"
        + _LAYERNORM_DOC + "multiplied by 1 + weight (formed in the weight's dtype, as the module forms it) and "
        "shifted by the\nbias in fp32, and cast to the output dtype once.\n",
        _WB_NOTE + loads("w") + "    w = (w + 1.0).to(w_ptr.dtype.element_ty).to(tl.float32)\n" + loads("b"),
        centred(note=False) + _AFFINE,
        {},
    ),
}  # fmt: skip
_X = "        x = tl.load(x_ptr + row * N_COLS + cols, mask=mask, other=0.0).to(tl.float32)\n"
_Y = "        tl.store(y_ptr + row * N_COLS + cols, y.to(y_ptr.dtype.element_ty), mask=mask)\n"
_SOURCES = {
    variant: row_kernel(doc + _PLAN_NOTE, KERNELS[variant], ARGS.get(variant, _ARGS)[:-2], state, _X + norm + _Y,
                        **notes)
    for variant, (doc, state, norm, notes) in _KERNEL_TEXT.items()
}  # fmt: skip


def _rewritten(source: str, changes: dict[str, str]) -> str:
    """`source` with each of `changes` made: every old text must be there exactly once (a change that no longer
    applies fails at import, never yields a silently different kernel)."""
    for old, new in changes.items():
        if source.count(old) != 1:
            raise RuntimeError(f"template text not found exactly once: {old!r}")
        source = source.replace(old, new)
    return source


_ROW_LOOP = "    for r in tl.static_range(ROWS):\n"


def _persistent(source: str) -> str:
    """A variant's kernel walking its rows in a loop strided by the grid (a persistent grid's): the program's row
    loop nested in one over its row blocks, the rest byte for byte."""
    head, loop = _rewritten(source, {"    first_row = tl.program_id(0) * ROWS\n": ""}).split(_ROW_LOOP)
    head = _rewritten(head, {_PLAN_NOTE: (
        "The launch plan sets ROWS (rows at a time) and the warps; each program walks row blocks strided by the\n"
        "grid (a persistent grid: at most one program per SM)."
    )})  # fmt: skip
    nested = "".join("    " + line if line.strip() else line for line in loop.splitlines(keepends=True))
    outer = "    for first_row in range(tl.program_id(0) * ROWS, n_rows, tl.num_programs(0) * ROWS):\n"
    return head + outer + "    " + _ROW_LOOP + nested
