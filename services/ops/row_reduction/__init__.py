"""The row-reduction op family (RMSNorm): its launch vocabulary and the wrapper that runs a plan.

A candidate of this family is kernel source plus a `LaunchPlan`. The plan picks a kernel, the
runtime arguments it takes (from `ARGS`, in order), its constexpr values (integer literals or
`CONSTEXPR_EXPRS`), a grid from `GRIDS`, warps and stages, and optionally a dispatch by row count.
`check_plan` is pure (the judge and the server run it before anything loads); `make_forward` turns a
checked plan and the loaded kernels into the Python that validates, allocates, launches and returns:
this module's code, identical in the judge's child and the server.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from services.core.pb import events_pb2 as pb
from services.ops.launch import Launcher, launch_options, next_pow2, stream_processors

FAMILY = "row_reduction"
# What this family's modules may compute (services.ops.recognise_norm), and which of those its template
# writes today; the others are recognised, recorded and refused with that reason, never written wrong.
VARIANTS = ("rmsnorm", "rmsnorm_offset", "layernorm", "layernorm_no_bias", "rmsnorm_fp32_weight", "layernorm_offset")
BIASED = ("layernorm", "layernorm_offset")  # a bias added after the weight: torch's LayerNorm, Nemotron's LayerNorm1P
OFFSET = ("rmsnorm_offset", "layernorm_offset")  # scaled by 1 + weight: Gemma's RMSNorm, Nemotron's LayerNorm1P
WRITABLE = VARIANTS
KIND = "module_class"  # the target is a module class: every instance's forward replaced
ENTRYPOINT = "rmsnorm"  # the wrapper's name in a contract (it runs every variant; the name is what contracts hold)
ENTRY_INPUTS = ("hidden_states",)  # forward inputs passed through
# The wrapper's signature: inputs, then bound module state. A bias is bound only where the module has one.
ENTRY_PARAMS = ("hidden_states", "weight", "eps", "bias")
OPTIONAL_PARAMS = ("bias",)
PARAM_KINDS = {"hidden_states": "tensor", "weight": "tensor", "eps": "float", "bias": "tensor"}
# Where a norm keeps its epsilon across model families: the instance attribute, in order of preference (the
# contract binds it, recognition reads it), and the constructor parameters that set it (the judge builds
# oracle instances with the live value), beside those that take the normalised width.
EPS_ATTRS = ("variance_epsilon", "eps", "epsilon", "layer_norm_eps")

# Runtime arguments a kernel may take, by the name a plan uses. x and y hold `rows` rows of `cols`, one after
# another (row stride = cols); the wrapper makes x so (a copy only when the caller's view is not).
ARGS = ("x", "w", "b", "y", "rows", "cols", "eps", "x_row_stride", "y_row_stride")  # b: the bias (LayerNorm)
# What each argument is, for the dataflow check (services.core.kernel_dataflow): x, w and b are read, y written.
ARG_ROLES = {"x": "input", "w": "input", "b": "input", "y": "output", "rows": "count", "cols": "shape", "eps": "scalar"}
ARG_ROLES |= {"x_row_stride": "stride", "y_row_stride": "stride"}
# the weight and bias hold no rows: read by columns only (services.core.row_locality); x's rows are y's
ROW_SPACES = {"w": "none", "b": "none"}
CONSTEXPR_EXPRS = ("cols", "block_cols")  # block_cols: the next power of two >= cols
MAX_BLOCK = 65536  # one row must fit one program's registers/shared memory
# The most rows a grid's program covers at once: the judge's repeated rows hold equal rows at every distance inside
# two tiles of the plan's rows per program up to this (services.judge.cases.row_blocks); a tile of 1,024 rows keyed
# to equal rows 512 apart passed a judging of 32 repeated rows (red-team round 13)
MAX_TILE_ROWS = 64
MAX_LAUNCHES = 4
# A row dispatch boundary must be one the judge can draw both sides of on a GPU (services.judge.cases).
MAX_DISPATCH_ROWS = 32768
MAX_CONSTEXPR = 1 << 31
NUM_WARPS = (1, 2, 4, 8, 16, 32)
MAX_STAGES = 8

# Grids, as text a plan holds: every program count a row kernel needs, none that computes anything else.
GRIDS = ("rows", "sms", "cdiv(rows, N)", "min(sms, cdiv(rows, N))")
_GRID = re.compile(r"^(?:(?P<rows>rows)|(?P<sms>sms)|cdiv\(rows, (?P<n>\d+)\)|min\(sms, cdiv\(rows, (?P<m>\d+)\)\))$")


class PlanError(ValueError):
    """A launch plan does not fit this family's vocabulary (rule `launch-plan`)."""


@dataclass(frozen=True)
class Grid:
    per_program: int  # rows each program covers (0: one program per SM, a persistent grid)
    capped: bool  # at most one program per SM

    def programs(self, rows: int, sms: int) -> int:
        if self.per_program == 0:
            return sms
        count = -(-rows // self.per_program)
        return min(sms, count) if self.capped else count


def live_state(module, roles=None) -> list[dict]:
    """The norm's live values, for the profile (services.server.live_parameters): its own vectors (weight, bias), by
    their attribute names; the judge runs every candidate on each distinct set."""
    vectors = {name: p for name, p in module.named_parameters(recurse=False) if p.dim() == 1 and p.is_floating_point()}
    return [vectors] if vectors else []


def rows_per_program(plan: pb.LaunchPlan) -> set[int]:
    """The rows one program covers in each of a checked plan's grids (a persistent grid's are not fixed)."""
    return {parse_grid(launch.grid).per_program for launch in plan.launches} - {0}


def parse_grid(text: str) -> Grid:
    match = _GRID.match(text)
    if match is None:
        raise PlanError(f"grid {text!r} is not one of {', '.join(GRIDS)} (N a positive integer)")
    if match["rows"]:
        return Grid(1, False)
    if match["sms"]:
        return Grid(0, True)
    n = int(match["n"] or match["m"])
    if not 1 <= n <= MAX_TILE_ROWS:
        raise PlanError(f"grid {text!r}: N must be 1..{MAX_TILE_ROWS} (the rows a program covers at once)")
    return Grid(n, match["m"] is not None)


def _constexpr_value(name: str, text: str) -> int | str:
    if text in CONSTEXPR_EXPRS:
        return text
    if re.fullmatch(r"-?\d{1,10}", text) and abs(int(text)) < MAX_CONSTEXPR:
        return int(text)
    raise PlanError(f"constexpr {name}={text!r} is neither an integer literal nor one of {', '.join(CONSTEXPR_EXPRS)}")


def check_launch(launch: pb.KernelLaunch, kernels: Mapping, args=ARGS, grid=parse_grid, value=None) -> None:
    """One launch against its kernel's signature and a family's vocabulary (`args`, `grid`, constexpr `value`
    parsers; this family's by default): raises PlanError at the first misfit."""
    value = value or _constexpr_value
    sig = kernels.get(launch.kernel)
    if sig is None:
        raise PlanError(f"launches {launch.kernel!r}, which is not a @triton.jit kernel of the source")
    unknown = [a for a in launch.args if a not in args]
    if unknown:
        raise PlanError(f"{launch.kernel}: runtime arguments {unknown} are not in the vocabulary ({', '.join(args)})")
    if len(set(launch.args)) != len(launch.args):
        raise PlanError(f"{launch.kernel}: a runtime argument is passed twice: {list(launch.args)}")
    runtime = [p for p in sig.params if p not in sig.constexprs]
    if list(sig.params[: len(runtime)]) != runtime:
        raise PlanError(f"{launch.kernel}: its runtime parameters must come before its constexprs")
    if len(launch.args) != len(runtime):
        raise PlanError(
            f"{launch.kernel} takes {len(runtime)} runtime arguments ({', '.join(runtime)}); "
            f"the plan passes {len(launch.args)} ({', '.join(launch.args)})"
        )
    for name, text in launch.constexprs.items():
        if name not in sig.constexprs:
            raise PlanError(f"{launch.kernel} has no constexpr parameter {name!r}")
        value(name, text)
    missing = sorted(sig.constexprs - set(launch.constexprs) - sig.defaults)
    if missing:
        raise PlanError(f"{launch.kernel}: constexprs {missing} have no value in the plan and no default")
    grid(launch.grid)
    if launch.num_warps not in NUM_WARPS:
        raise PlanError(f"{launch.kernel}: num_warps={launch.num_warps} is not one of {NUM_WARPS}")
    if launch.num_stages > MAX_STAGES:
        raise PlanError(f"{launch.kernel}: num_stages={launch.num_stages} is over {MAX_STAGES}")


def check_one_launch(plan: pb.LaunchPlan, kernels: Mapping, family: str, **vocabulary) -> list[pb.Finding]:
    """Findings (rule `launch-plan`) for a family whose plan is one launch serving every size (the gated MLP's,
    RoPE's), in its `vocabulary` (check_launch's args, grid, value); [] when it fits."""
    try:
        if plan.family != family:
            raise PlanError(f"the plan is for family {plan.family!r}, this wrapper is {family!r}")
        if len(plan.launches) != 1 or plan.launches[0].max_rows:
            raise PlanError(f"a {family} plan is one launch that serves every size (max_rows 0)")
        check_launch(plan.launches[0], kernels, **vocabulary)
    except PlanError as exc:
        return [pb.Finding(rule_id="launch-plan", reason=str(exc))]
    return []


def check_plan(plan: pb.LaunchPlan, kernels: Mapping, *, family: str = FAMILY, args=ARGS) -> list[pb.Finding]:
    """Findings (rule `launch-plan`) for a plan against the source's kernel signatures; [] when it fits.

    `kernels` maps a kernel name to its signature (services.core.kernel_schema.KernelSignature). `family` and
    `args` are another row family's (services.ops.residual_norm: these rows with a residual operand).
    """
    try:
        if plan.family != family:
            raise PlanError(f"the plan is for family {plan.family!r}, this wrapper is {family!r}")
        if not 1 <= len(plan.launches) <= MAX_LAUNCHES:
            raise PlanError(f"a plan holds 1..{MAX_LAUNCHES} launches, this one {len(plan.launches)}")
        limits = [launch.max_rows for launch in plan.launches]
        if limits[-1] != 0:
            raise PlanError("the last launch must serve any row count (max_rows 0), or some calls have no kernel")
        if any(m == 0 for m in limits[:-1]) or limits[:-1] != sorted(set(limits[:-1])):
            raise PlanError(f"row dispatch limits must rise strictly before the last, catch-all launch: {limits}")
        if any(m > MAX_DISPATCH_ROWS for m in limits):
            raise PlanError(f"a row dispatch limit over {MAX_DISPATCH_ROWS} rows cannot be judged on both sides")
        for launch in plan.launches:
            check_launch(launch, kernels, args=args)
    except PlanError as exc:
        return [pb.Finding(rule_id="launch-plan", reason=str(exc))]
    return []


@dataclass(frozen=True)
class _Launch:
    launcher: Launcher
    args: tuple[str, ...]
    constexprs: tuple[tuple[str, int | str], ...]
    grid: Grid
    max_rows: int


def _compile(plan: pb.LaunchPlan, kernels: Mapping[str, Callable]) -> list[_Launch]:
    out = []
    for launch in plan.launches:
        out.append(
            _Launch(
                launcher=Launcher(kernels[launch.kernel], launch_options(launch)),
                args=tuple(launch.args),
                constexprs=tuple((k, _constexpr_value(k, v)) for k, v in sorted(launch.constexprs.items())),
                grid=parse_grid(launch.grid),
                max_rows=launch.max_rows,
            )
        )
    return out


def scale_of(variant: str, weight):
    """The weight a norm of `variant` scales by, in the weight's dtype: 1 + weight for the offset norms (torch's
    add: in fp32, rounded once to the weight's dtype, as LayerNorm1P forms it), the weight itself otherwise. What
    torch's native norm is given to compute the same op, and LayerNorm1P's own scale."""
    return weight + 1.0 if variant in OFFSET else weight


def check_norm_inputs(hidden_states, weight, bias) -> None:
    import torch

    if not isinstance(hidden_states, torch.Tensor) or not isinstance(weight, torch.Tensor):
        raise TypeError("rmsnorm takes tensors for hidden_states and weight")
    if weight.dim() != 1 or hidden_states.dim() < 1 or hidden_states.shape[-1] != weight.shape[0]:
        raise ValueError(
            f"hidden_states {tuple(hidden_states.shape)} does not end in the weight width {tuple(weight.shape)}"
        )
    if bias is not None and (not isinstance(bias, torch.Tensor) or tuple(bias.shape) != tuple(weight.shape)):
        shown = tuple(bias.shape) if isinstance(bias, torch.Tensor) else type(bias).__name__
        raise ValueError(f"the bias {shown} is not a tensor of the weight's shape {tuple(weight.shape)}")
    if not hidden_states.dtype.is_floating_point or not weight.dtype.is_floating_point:
        raise TypeError(f"rmsnorm needs floating tensors, got {hidden_states.dtype} and {weight.dtype}")
    if hidden_states.device != weight.device:
        raise ValueError(f"hidden_states on {hidden_states.device} but weight on {weight.device}")


class RowLaunches:
    """A checked plan's launches, compiled once: picks the launch for a row count and launches it (every row
    family's wrapper: the norm's, the residual norm's, the parallel norm's)."""

    def __init__(self, plan: pb.LaunchPlan, kernels: Mapping[str, Callable]):
        self.items = _compile(plan, kernels)
        self.takes_bias = any("b" in item.args for item in self.items)
        self.launchers = [item.launcher for item in self.items]  # read by services.ops.launch.direct_launches

    def check_bias(self, bias) -> None:
        if self.takes_bias != (bias is not None):  # a LayerNorm's bias must be added, and only a LayerNorm has one
            have = "a bias" if bias is not None else "no bias"
            raise ValueError(
                f"the plan's kernels {'take' if self.takes_bias else 'take no'} bias but the module has {have}"
            )

    def run(self, x, n_cols: int, eps, operands: Mapping[str, object], launch: bool = True) -> None:
        """Launch for the rows of `x` (contiguous, `n_cols` wide) with the `operands` by argument name and the row
        facts a row kernel may take besides (rows, cols, eps, the row strides); nothing when `x` has no rows or
        `launch` is False (the judge's ghost replay: the outputs left unwritten)."""
        rows = x.numel() // n_cols
        if rows == 0 or not launch:
            return
        values = {**operands, "rows": rows, "cols": n_cols, "eps": float(eps), "x_row_stride": n_cols,
                  "y_row_stride": n_cols}  # fmt: skip
        self(rows, n_cols, x.device, values)

    def __call__(self, rows: int, n_cols: int, device, values: Mapping[str, object]) -> None:
        """Launch the plan's launch for `rows` rows of `n_cols` with the runtime `values` by argument name."""
        chosen = next(item for item in self.items if item.max_rows == 0 or rows <= item.max_rows)
        exprs = {"cols": n_cols, "block_cols": block_cols(n_cols)}
        constexprs = {k: exprs[v] if isinstance(v, str) else v for k, v in chosen.constexprs}
        programs = chosen.grid.programs(rows, stream_processors(device))
        chosen.launcher(programs, [values[a] for a in chosen.args], constexprs)


def block_cols(n_cols: int) -> int:
    """The next power of two >= the width: one row in one program's block; ValueError past MAX_BLOCK."""
    block = next_pow2(n_cols)
    if block > MAX_BLOCK:
        raise ValueError(f"width {n_cols} is too wide for a one-pass row kernel (at most {MAX_BLOCK})")
    return block


def make_forward(plan: pb.LaunchPlan, kernels: Mapping[str, Callable], *, empty=None, launch: bool = True) -> Callable:
    """rmsnorm(hidden_states, weight, eps, bias=None) running `plan` (checked by `check_plan`) with the loaded kernels.

    `empty` allocates the output (torch.empty's signature; the judge passes one that surrounds it with
    guard bytes). `launch=False` skips the kernel launch and returns the unwritten output: the judge's
    ghost replay, which must differ from a real call's answer.
    """
    import torch

    launches = RowLaunches(plan, kernels)
    allocate = empty or torch.empty

    def rmsnorm(hidden_states, weight, eps, bias=None):
        check_norm_inputs(hidden_states, weight, bias)
        launches.check_bias(bias)
        n_cols = weight.shape[0]
        block_cols(n_cols)
        # The rows are consecutive n_cols-wide slices of one contiguous buffer, whatever the leading dims: the
        # input as it is when it is so (no reshape, no copy: each torch call costs the host microseconds at
        # decode), a copy of it when not. The output is allocated in the input's shape.
        x = hidden_states if hidden_states.is_contiguous() else hidden_states.contiguous()
        y = allocate(x.shape, dtype=torch.promote_types(weight.dtype, x.dtype), device=x.device)
        state = {"w": weight.contiguous(), "b": None if bias is None else bias.contiguous()}
        launches.run(x, n_cols, eps, {"x": x, **state, "y": y}, launch)
        return y

    rmsnorm.launchers = launches.launchers
    return rmsnorm


def bytes_moved(rows: int, cols: int, x_bytes: int, w_bytes: int, y_bytes: int) -> int:
    """Bytes one call must move at least: the input read, the weight read once, the output written."""
    return rows * cols * (x_bytes + y_bytes) + cols * w_bytes


def timed_bytes(dims: list[int], itemsizes: tuple[int, int, int]) -> int:
    """Bytes a call on a timed input of shape `dims` must move (itemsizes: input, weight, output)."""
    rows = 1
    for d in dims[:-1]:
        rows *= d
    return bytes_moved(rows, dims[-1], *itemsizes)


def recognise(module) -> str | None:
    """The variant a live module computes, found by running it (torch imported only here)."""
    from services.ops.recognise_norm import recognise as run_and_compare

    return run_and_compare(module)


def native_op(module, width: int, eps: float | None):
    """torch's fused op computing what the norm `module` computes (seen running it: services.ops.recognise_norm):
    F.rms_norm for an RMSNorm (with 1 + weight, formed once here, for Gemma's), F.layer_norm for a LayerNorm (of
    1 + weight for LayerNorm1P). None when torch has none: the native baseline a norm candidate is held to."""
    import torch

    from services.ops.recognise_norm import recognise

    F = torch.nn.functional
    weight = getattr(module, "weight", None)
    if not isinstance(weight, torch.Tensor) or eps is None:
        return None
    variant = recognise(module) or "rmsnorm"  # a module the probe cannot run: the RMSNorm it was judged as
    if variant in ("rmsnorm", "rmsnorm_fp32_weight") and hasattr(F, "rms_norm"):
        return lambda x: F.rms_norm(x, (width,), weight, eps)
    if variant == "rmsnorm_offset" and hasattr(F, "rms_norm"):
        scale = scale_of(variant, weight)
        return lambda x: F.rms_norm(x, (width,), scale, eps)
    if variant.startswith("layernorm"):
        bias = getattr(module, "bias", None) if variant in BIASED else None
        scale = scale_of(variant, weight)
        return lambda x: F.layer_norm(x, (width,), scale, bias, eps)
    return None
