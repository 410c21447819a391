"""The parallel-norm op family: a parallel-residual layer's two norms of one hidden state, fused into one pass.

A GPT-NeoX (Pythia) layer with a parallel residual computes

    attention_out = attention(input_norm(x))
    mlp_out = mlp(post_norm(x))                 x again, not x + attention_out
    out = mlp_out + attention_out + x

so each row of `x` is read twice, by two norm launches. This family's op reads it once:
`dual_norm(x, w1, b1, w2, b2, eps) -> (norm(x; w1, b1), norm(x; w2, b2))`, the row reduced once (its mean and
variance, or its mean square) and the two norms' weights (and biases) applied to the one normalised row, each output
rounded to the dtype as the layer's own norm rounds it. Both norms are one variant (services.ops.recognise_norm) at
one width with one epsilon; a variant here is `dual_` and theirs.

A plan is the norm family's row plan (services.ops.row_reduction: the same grids, constexprs and dispatch by rows)
with three more runtime arguments: `w2` and `b2`, the second norm's weight and bias (read like `w` and `b`), and
`y2`, the second output (written like `y`: rows of cols, contiguous).

The target is the layer (a `layer` contract binding its four children by role); `make_forward` is the rewritten
forward, which computes both norms first (they read the same input, so computing them before the attention gives
the same values), then calls the layer's own attention (with every other argument the layer was given) and MLP,
and adds `mlp + attention + x` in the layer's order. What a layer computes is found by running it
(services.ops.parallel_norm.recognition), never from its class or attribute names.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping

from services.core.pb import events_pb2 as pb
from services.ops import row_reduction

# its wrapper's parameters are every decoder rewrite's: the layer's input, its four children by role
from services.ops.decoder_layer import ENTRY_INPUTS, ENTRY_PARAMS, OPTIONAL_PARAMS, PARAM_KINDS, PASSES_INPUTS, ROLES  # noqa: F401
from services.ops.layer_children import norm_children, roled_children
from services.ops.layer_contract import decoder_layer_contract, live_decoder_contract, norms_of_one_width
from services.ops.parallel_norm import recognition
from services.ops.row_reduction import RowLaunches, block_cols, check_norm_inputs

FAMILY = "parallel_norm"
PREFIX = "dual_"  # a variant is the two norms' (services.ops.recognise_norm), prefixed
VARIANTS = tuple(PREFIX + v for v in row_reduction.VARIANTS)
# What the template writes: GPT-NeoX's LayerNorm, and Llama's RMSNorm (a parallel layer of two of them); the other
# variants are recognised and recorded, and refused for want of a template, never written wrong.
WRITABLE = ("dual_layernorm", "dual_rmsnorm")
KIND = "layer"  # the target is the layer, whose forward is rewritten keeping its attention and MLP
ENTRYPOINT = "dual_norm_layer"
# Runtime arguments a kernel may take: the norm family's, with the second norm's weight and bias read beside w and b
# and its output written beside y.
ARGS = (*row_reduction.ARGS, "w2", "b2", "y2")
ARG_ROLES = {**row_reduction.ARG_ROLES, "w2": "input", "b2": "input", "y2": "output"}
ROW_SPACES = {**row_reduction.ROW_SPACES, "w2": "none", "b2": "none"}  # each norm's weight and bias: no rows
MAX_BLOCK = row_reduction.MAX_BLOCK


def rows_per_program(plan: pb.LaunchPlan) -> set[int]:
    return row_reduction.rows_per_program(plan)


def live_state(module, roles) -> list[dict]:
    """Both norms' live values, for the profile: each named by its role ("input_norm.weight", "post_norm.bias")."""
    out = {}
    for role in ("input_norm", "post_norm"):
        norm = getattr(module, roles.get(role, ""), None) if roles else None
        if norm is None:
            return []
        for state in row_reduction.live_state(norm):
            out |= {f"{role}.{name}": t for name, t in state.items()}
    return [out]


def norm_variant(variant: str) -> str:
    """The norms' variant (the norm family's name) of one of this family's."""
    return variant.removeprefix(PREFIX)


# ---------------------------------------------------------------- what a layer computes


def identify(module) -> tuple[str, dict[str, str]] | None:
    """(variant, {role: child name}) of a parallel-residual layer, found by running it with its attention and MLP
    stood in for (services.ops.parallel_norm.recognition); None when `module` is not one."""
    found = recognition.identify(module)
    return (PREFIX + found[0], found[1]) if found else None


def recognise(module) -> str | None:
    """The variant `module` computes (see VARIANTS), or None. Only a module of four children (and dropouts) is
    tried."""
    found = identify(module) if len(roled_children(module)) == 4 else None  # the cheap test before any probe
    return found[0] if found else None


def roles_of(module) -> dict[str, str]:
    """{wrapper parameter: child attribute} of a parallel-residual layer, found by running it; {} when it is not."""
    found = identify(module)
    return dict(found[1]) if found else {}


def layer_shaped(module) -> bool:
    """Two norm children and two others with parameters (structural; a probe of the norms only): what parity
    records calls of, and what recognition runs."""
    return norm_children(module) is not None


# ---------------------------------------------------------------- the reference, bytes


def reference(variant: str) -> Callable:
    """norm(x, weight, bias, eps) as the layer's own norm computes it in x's dtype (torch's LayerNorm, of 1 + weight
    for LayerNorm1P; HF's RMSNorms with their casts), the same formulas carried out in float64 when given float64
    tensors: the judge's oracle. Every variant the family recognises (an LLM author may write any of them), not only
    the template's."""
    import torch

    F = torch.nn.functional
    inner = norm_variant(variant)
    if variant not in VARIANTS:
        raise ValueError(f"no parallel-norm variant {variant!r} (known: {', '.join(VARIANTS)})")

    def norm(x, weight, bias, eps):
        if inner.startswith("layernorm"):
            scale = row_reduction.scale_of(inner, weight)  # LayerNorm1P's 1 + weight, in its dtype
            return F.layer_norm(x, (x.shape[-1],), scale, bias if inner in row_reduction.BIASED else None, eps)
        f = x.to(torch.promote_types(x.dtype, torch.float32))  # HF's upcast; float64 stays float64
        normed = f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + eps)
        if inner == "rmsnorm":  # Llama/Qwen: cast back before the weight, in the promoted dtype
            return weight * normed.to(x.dtype)
        if inner == "rmsnorm_fp32_weight":  # OLMo2: the weight applied in fp32, one rounding
            return (weight.to(f.dtype) * normed).to(x.dtype)
        return (normed * (1.0 + weight.to(f.dtype))).to(x.dtype)  # Gemma's rmsnorm_offset

    return norm


def bytes_moved(rows: int, cols: int, itemsize: int, w_bytes: int) -> int:
    """Bytes one fused call must move at least: the input read once, two outputs written, two weights and biases."""
    return 3 * rows * cols * itemsize + 4 * cols * w_bytes


def timed_bytes(dims: list[int], itemsizes: tuple[int, int, int]) -> int:
    """Bytes a call on a timed input (rows..., width) must move (itemsizes: input, weight, output)."""
    rows = 1
    for d in dims[:-1]:
        rows *= d
    return rows * dims[-1] * (itemsizes[0] + 2 * itemsizes[2]) + 4 * dims[-1] * itemsizes[1]


# ---------------------------------------------------------------- launch plans and the layer wrapper


def check_plan(plan: pb.LaunchPlan, kernels: Mapping) -> list[pb.Finding]:
    """Findings (rule `launch-plan`) for a plan of this family: the norm family's vocabulary, with w2, b2 and y2."""
    return row_reduction.check_plan(plan, kernels, family=FAMILY, args=ARGS)


def _check_second(x, w1, b1, w2, b2) -> None:
    """The second norm's state: a weight like the first's (shape, dtype, device), a bias where the first has one."""
    import torch

    check_norm_inputs(x, w2, b2)
    if w2.shape != w1.shape or w2.dtype != w1.dtype:
        raise ValueError(f"the second weight {tuple(w2.shape)} {w2.dtype} is not like the first "
                         f"{tuple(w1.shape)} {w1.dtype}")  # fmt: skip
    if (b1 is None) != (b2 is None) or (b2 is not None and not isinstance(b2, torch.Tensor)):
        raise ValueError("both norms have a bias, or neither has")


def make_op(plan: pb.LaunchPlan, kernels: Mapping[str, Callable], *, empty=None, launch: bool = True) -> Callable:
    """dual_norm(x, w1, b1, w2, b2, eps) -> (first, second) with the plan's kernels (checked by `check_plan`): both
    norms of `x` (b1 and b2 None for a norm without a bias). `empty` allocates the outputs (torch.empty's
    signature); `launch=False` skips the kernel (the judge's ghost replay)."""
    import torch

    launches = RowLaunches(plan, kernels)
    allocate = empty or torch.empty

    def dual_norm(x, w1, b1, w2, b2, eps):
        check_norm_inputs(x, w1, b1)
        _check_second(x, w1, b1, w2, b2)
        launches.check_bias(b1)
        n_cols = w1.shape[0]
        block_cols(n_cols)
        x = x if x.is_contiguous() else x.contiguous()
        dtype = torch.promote_types(w1.dtype, x.dtype)
        first = allocate(x.shape, dtype=dtype, device=x.device)
        second = allocate(x.shape, dtype=dtype, device=x.device)
        contiguous = lambda t: None if t is None else t.contiguous()  # noqa: E731
        state = {"w": w1.contiguous(), "b": contiguous(b1), "w2": w2.contiguous(), "b2": contiguous(b2)}
        launches.run(x, n_cols, eps, {"x": x, **state, "y": first, "y2": second}, launch)
        return first, second

    dual_norm.launchers = launches.launchers
    return dual_norm


def make_forward(plan: pb.LaunchPlan, kernels: Mapping[str, Callable], *, empty=None, launch: bool = True) -> Callable:
    """dual_norm_layer(hidden_states, input_norm, attention, post_norm, mlp, **passed): the parallel-residual layer's
    forward with its two norms fused (`make_op`), its own attention and MLP doing the rest. The norms run first, so a
    kernel that fails raises before any child with state (the attention's KV cache) has run: the server answers the
    call with the layer's own forward."""
    from services.ops.recognise_norm import epsilon_of

    op = make_op(plan, kernels, empty=empty, launch=launch)

    def dual_norm_layer(hidden_states, input_norm, attention, post_norm, mlp, **passed):
        eps = epsilon_of(input_norm)
        if eps is None or epsilon_of(post_norm) != eps:  # one epsilon is what the fused op takes
            raise ValueError(f"the norms' epsilons differ ({eps} and {epsilon_of(post_norm)})")
        first, second = op(hidden_states, input_norm.weight, getattr(input_norm, "bias", None), post_norm.weight,
                           getattr(post_norm, "bias", None), eps)  # fmt: skip
        attended = attention(first, **passed)
        if isinstance(attended, tuple):  # (output, attention weights)
            attended = attended[0]
        return mlp(second) + attended + hidden_states  # the layer's order of adds (recognition checked it)

    dual_norm_layer.launchers = op.launchers
    return dual_norm_layer


# ---------------------------------------------------------------- the layer contract


def contract_for(module, class_path: str) -> pb.Contract | None:
    """The layer contract of a live parallel-residual layer: its forward's inputs, its four children bound by role."""
    return live_decoder_contract(sys.modules[__name__], module, class_path)


def roles_problem(shapes: Mapping[str, tuple[int, ...]]) -> str:
    """Why children with these weight shapes cannot be a parallel-residual layer's ("" when they can): its two norms
    must be norms of one width."""
    return norms_of_one_width(shapes)


def layer_contract(class_path: str, forward_params, roles: Mapping[str, str]) -> pb.Contract | None:
    """The layer contract from what the profile recorded (pure: the coder derives it from the log)."""
    return decoder_layer_contract(sys.modules[__name__], class_path, forward_params, roles)
