"""The residual-norm op family: a decoder layer's residual add fused with the norm after it, as a layer rewrite.

A pre-norm decoder layer (Llama, Qwen2/3, Mistral, Gemma, GPT-2) computes

    s = x + attention(input_norm(x))          the attention's residual add
    out = s + mlp(post_norm(s))               the norm before the MLP, and the MLP's residual add

so between the attention and the MLP, `s` is written by one kernel and read back by the next. This family's
op does both in one pass over each row: `add_norm(a, x, weight, eps[, bias]) -> (post_norm(a + x), a + x)`,
the sum rounded to the served dtype first exactly as torch's add rounds it, then normalised as the post norm
computes (any variant the norm family recognises: services.ops.recognise_norm). It is the norm family's
row reduction with the residual as an extra operand and the sum as an extra output (quack's shape): the same
launch vocabulary and dispatch (services.ops.row_reduction), two more runtime arguments.

The target is the decoder layer (a `layer` contract binding its four children by role); `make_forward` is the
rewritten forward, which keeps the layer's own input norm, attention and MLP and passes the attention every
argument the layer was given, as these layers do. What a layer computes is found by running it with its
attention and MLP stood in for by recording stand-ins (`identify`), never from its class or attribute names:
the norm whose input is the layer's input, the attention fed its output, the other norm fed exactly
`x + attention's output`, the MLP fed that norm's output, and the layer returning `s + mlp's output` —
bitwise. A parallel block (Cohere: one norm, attention and MLP side by side) or a layer with more norms (Gemma 2)
is not this op, and is not recognised.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Mapping

from services.core.pb import events_pb2 as pb
from services.ops import row_reduction

# its wrapper's parameters are every decoder rewrite's: the layer's input, its four children by role
from services.ops.decoder_layer import ENTRY_INPUTS, ENTRY_PARAMS, OPTIONAL_PARAMS, PARAM_KINDS, PASSES_INPUTS, ROLES  # noqa: F401
from services.ops.layer_children import norm_children, roled_children, run_stood_in, same
from services.ops.layer_contract import decoder_layer_contract, live_decoder_contract, norms_of_one_width
from services.ops.row_reduction import RowLaunches, block_cols, check_norm_inputs

FAMILY = "residual_norm"
# What a layer computes: the residual add, then the post norm's variant (services.ops.recognise_norm).
PREFIX = "add_"
VARIANTS = tuple(PREFIX + v for v in row_reduction.VARIANTS)
WRITABLE = VARIANTS
KIND = "layer"  # the target is the decoder layer, whose forward is rewritten keeping its children
ENTRYPOINT = "add_norm_layer"
# Runtime arguments a kernel may take: the norm family's, with the residual `r` read beside x and the sum `s`
# written beside y (both rows of cols, contiguous like x and y).
ARGS = (*row_reduction.ARGS, "r", "s")
ARG_ROLES = {**row_reduction.ARG_ROLES, "r": "input", "s": "output"}  # the residual read, the sum written
ROW_SPACES = row_reduction.ROW_SPACES  # x, r, s and y: one set of rows; the post norm's weight and bias none
MAX_BLOCK = row_reduction.MAX_BLOCK
READS_PER_WRITE = 1  # two rows read (x, r), two written (y, s): a copy's mix
PROBE_SHAPE = (1, 3)  # batch, positions of the recognition probe


def rows_per_program(plan: pb.LaunchPlan) -> set[int]:
    return row_reduction.rows_per_program(plan)


# ---------------------------------------------------------------- what a layer computes


def _standins(attention_pair: bool = True, mlp_pair: bool = False):
    """A recording attention (returns (output, None), as HF attentions do, or without `attention_pair` a tensor, as
    a linear attention does: Qwen3-Next's) and a recording MLP (a tensor, or with `mlp_pair` (output, None), as a
    mixture of experts returning its router's scores beside it does: GPT-OSS's)."""
    import torch

    class Attention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inputs: list = []
            self.outputs: list = []

        def forward(self, *args, **kwargs):
            h = args[0] if args else kwargs.get("hidden_states")
            out = h * 0.5 + 0.25
            self.inputs.append(h)
            self.outputs.append(out)
            self.positional = len(args)  # the rewrite passes the normed input alone by position (CTRL passes 3)
            return (out, None) if attention_pair else out

    class Mlp(Attention):
        def forward(self, h, *args, **kwargs):
            out = h * -0.75 + 0.125
            self.inputs.append(h)
            self.outputs.append(out)
            return (out, None) if mlp_pair else out

    return Attention(), Mlp()


def _traced(layer, attention: str, mlp: str, norms, probe, pairs: tuple[bool, bool] = (True, False)) -> dict | None:
    """The layer run on `probe` with its `attention` and `mlp` children stood in for: what each part was fed and
    gave ({"norms": {name: (input, output)}, "attention"/"mlp": (input, output), "out": the layer's output})."""
    att, mlp_standin = _standins(*pairs)
    seen: dict[str, list] = {}
    hooks = {
        name: lambda m, a, o, name=name: seen.setdefault(name, []).append((a[0] if a else None, o))
        for name, _ in layer.named_children()
        if name in norms
    }
    ran, out = run_stood_in(layer, {attention: att, mlp: mlp_standin}, hooks, probe)
    if not ran:
        return None
    if len(att.inputs) != 1 or len(mlp_standin.inputs) != 1 or any(len(v) != 1 for v in seen.values()):
        return None
    if att.positional > 1:  # an attention given more than its input by position is called otherwise than ours
        return None
    return {
        "norms": {name: calls[0] for name, calls in seen.items()},
        "attention": (att.inputs[0], att.outputs[0]),
        "mlp": (mlp_standin.inputs[0], mlp_standin.outputs[0]),
        "out": out,
    }


def decoder_shaped(module) -> bool:
    """Two norm children and two others with parameters: what `identify` tries (its probe of the norms only)."""
    return len(roled_children(module)) == 4 and norm_children(module) is not None


def identify(layer) -> tuple[str, dict[str, str]] | None:
    """(variant, {role: child name}) of a pre-norm decoder layer; None when `layer` is not one. Runs its forward
    eight times at most on a probe, its attention and MLP stood in for (restored before returning)."""
    import torch

    found = norm_children(layer)
    if found is None:
        return None
    norms, others = found
    weights = {name: getattr(layer, name).weight for name in norms}
    first = next(iter(weights.values()))
    if len({tuple(w.shape) for w in weights.values()}) != 1:
        return None
    gen = torch.Generator().manual_seed(int(first.shape[0]))
    probe = torch.randn(*PROBE_SHAPE, int(first.shape[0]), generator=gen).to(first.device, first.dtype)
    # the attention answering (output, weights) or a tensor (a linear attention), the MLP a tensor or (output,
    # scores) of which the layer keeps the output (GPT-OSS's experts)
    pairs = ((True, False), (False, False), (True, True), (False, True))
    for (attention, mlp), answers in itertools.product(itertools.permutations(others), pairs):
        trace = _traced(layer, attention, mlp, norms, probe, answers)
        if trace is None:
            continue
        a_in, a_out = trace["attention"]
        m_in, m_out = trace["mlp"]
        by_input = {name: io for name, io in trace["norms"].items()}
        pre = next((n for n, (i, _) in by_input.items() if same(i, probe)), None)
        post = next((n for n in by_input if n != pre), None)
        if pre is None or post is None or not same(a_in, by_input[pre][1]):
            continue
        summed = probe + a_out
        if same(by_input[post][0], summed) and same(m_in, by_input[post][1]) and same(trace["out"], summed + m_out):
            roles = {"input_norm": pre, "attention": attention, "post_norm": post, "mlp": mlp}
            return PREFIX + norms[post], roles
    return None


def recognise(module) -> str | None:
    """The variant `module` computes (see VARIANTS), or None. Only a module of four children (and dropouts) is
    tried."""
    found = identify(module) if len(roled_children(module)) == 4 else None
    return found[0] if found else None


def roles_of(module) -> dict[str, str]:
    """{wrapper parameter: child attribute} of a decoder layer, found by running it; {} when it is not one."""
    found = identify(module)
    return dict(found[1]) if found else {}


def live_state(module, roles) -> list[dict]:
    """The post norm's live values (weight, bias), for the profile: by the norm's own attribute names."""
    post = getattr(module, roles.get("post_norm", ""), None) if roles else None
    return row_reduction.live_state(post) if post is not None else []


def norm_variant(variant: str) -> str:
    """The post norm's variant (the norm family's name) of one of this family's."""
    return variant.removeprefix(PREFIX)


# ---------------------------------------------------------------- the reference, bytes


def reference(variant: str) -> Callable:
    """add_norm(a, x, weight, eps, bias=None) -> (normed, summed) as the HF layer computes it: the sum rounded to
    the dtype by torch's add, then the post norm's formula in fp32 with HF's casts (the oracle of the judge)."""
    import torch

    inner = norm_variant(variant)
    if inner not in row_reduction.VARIANTS:
        raise ValueError(f"no residual-norm variant {variant!r} (known: {', '.join(VARIANTS)})")

    def add_norm(a, x, weight, eps, bias=None):
        s = x + a
        f = s.float()
        if inner.startswith("rmsnorm"):
            normed = f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + eps)
            if inner == "rmsnorm":  # Llama/Qwen: cast back before the weight, in the promoted dtype
                return weight * normed.to(s.dtype), s
            if inner == "rmsnorm_fp32_weight":  # OLMo2: the weight applied in fp32, one rounding
                return (weight * normed).to(s.dtype), s
            return (normed * (1.0 + weight.float())).to(s.dtype), s
        centred = f - f.mean(-1, keepdim=True)
        scale = row_reduction.scale_of(inner, weight)  # LayerNorm1P's 1 + weight, in its dtype
        y = centred * torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + eps) * scale.float()
        if bias is not None:
            y = y + bias.float()
        return y.to(s.dtype), s

    return add_norm


def bytes_moved(rows: int, cols: int, itemsize: int, w_bytes: int) -> int:
    """Bytes one fused call must move at least: a and x read, the normed row and the sum written, the weight."""
    return 4 * rows * cols * itemsize + cols * w_bytes


def timed_bytes(dims: list[int], itemsizes: tuple[int, int, int]) -> int:
    """Bytes a call on a timed input must move: the judge times (a, x) stacked as one (2, ..., width) tensor."""
    rows = 1
    for d in dims[1:-1]:
        rows *= d
    return bytes_moved(rows, dims[-1], itemsizes[0], itemsizes[1])


def unfused_bytes(rows: int, cols: int, itemsize: int, w_bytes: int) -> int:
    """What torch's add and norm move: the add reads two rows and writes one, the norm reads it back and writes."""
    return 5 * rows * cols * itemsize + cols * w_bytes


# ---------------------------------------------------------------- launch plans and the layer wrapper


def check_plan(plan: pb.LaunchPlan, kernels: Mapping) -> list[pb.Finding]:
    """Findings (rule `launch-plan`) for a plan of this family: the norm family's vocabulary, with r and s."""
    return row_reduction.check_plan(plan, kernels, family=FAMILY, args=ARGS)


def make_op(plan: pb.LaunchPlan, kernels: Mapping[str, Callable], *, empty=None, launch: bool = True) -> Callable:
    """add_norm(a, x, weight, eps, bias=None) -> (normed, summed) with the plan's kernels (checked by
    `check_plan`): `a` the attention's output, `x` the residual. `empty` allocates the outputs (torch.empty's
    signature); `launch=False` skips the kernel (the judge's ghost replay)."""
    import torch

    launches = RowLaunches(plan, kernels)
    allocate = empty or torch.empty

    def add_norm(a, x, weight, eps, bias=None):
        check_norm_inputs(a, weight, bias)
        if not isinstance(x, torch.Tensor) or x.shape != a.shape or x.dtype != a.dtype or x.device != a.device:
            shown = (tuple(x.shape), x.dtype) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"the residual {shown} must be a tensor of the attention output's shape and dtype "
                             f"{(tuple(a.shape), a.dtype)} on its device")  # fmt: skip
        launches.check_bias(bias)
        n_cols = weight.shape[0]
        block_cols(n_cols)
        a = a if a.is_contiguous() else a.contiguous()
        x = x if x.is_contiguous() else x.contiguous()
        y = allocate(a.shape, dtype=torch.promote_types(weight.dtype, a.dtype), device=a.device)
        s = allocate(a.shape, dtype=a.dtype, device=a.device)
        state = {"w": weight.contiguous(), "b": None if bias is None else bias.contiguous()}
        launches.run(a, n_cols, eps, {"x": a, "r": x, **state, "y": y, "s": s}, launch)
        return y, s

    add_norm.launchers = launches.launchers
    return add_norm


def make_forward(plan: pb.LaunchPlan, kernels: Mapping[str, Callable], *, empty=None, launch: bool = True) -> Callable:
    """add_norm_layer(hidden_states, input_norm, attention, post_norm, mlp, **passed): the decoder layer's forward
    with its attention's residual add and its post norm fused (`make_op`), its own children doing the rest. The
    attention gets the normed input first and every other argument the layer was given, by name."""
    from services.ops.recognise_norm import epsilon_of

    op = make_op(plan, kernels, empty=empty, launch=launch)

    def add_norm_layer(hidden_states, input_norm, attention, post_norm, mlp, **passed):
        attended = attention(input_norm(hidden_states), **passed)
        if isinstance(attended, tuple):  # (output, attention weights)
            attended = attended[0]
        try:
            normed, summed = op(attended, hidden_states, post_norm.weight, epsilon_of(post_norm),
                                getattr(post_norm, "bias", None))  # fmt: skip
        except Exception as exc:  # the attention has run (its KV cache appended): answer here, never run it twice
            from services.ops import Answered

            summed = hidden_states + attended
            raise Answered(summed + _output(mlp(post_norm(summed))), exc) from exc
        return summed + _output(mlp(normed))

    add_norm_layer.launchers = op.launchers
    return add_norm_layer


def _output(answer):
    """An MLP's output: its answer, or the first of (output, router scores) (recognition found the layer keeps it)."""
    return answer[0] if isinstance(answer, tuple) else answer


def contract_for(module, class_path: str) -> pb.Contract | None:
    """The layer contract of a live decoder layer: its forward's inputs, its four children bound by role."""
    return live_decoder_contract(sys.modules[__name__], module, class_path)


def roles_problem(shapes: Mapping[str, tuple[int, ...]]) -> str:
    """Why children with these weight shapes cannot be a decoder layer's ("" when they can): its two norms must be
    of one width."""
    return norms_of_one_width(shapes)


def layer_contract(class_path: str, forward_params, roles: Mapping[str, str]) -> pb.Contract | None:
    """The layer contract from what the profile recorded (pure: the coder derives it from the log)."""
    return decoder_layer_contract(sys.modules[__name__], class_path, forward_params, roles)


def layer_shaped(module) -> bool:
    """Whether this family could rewrite `module` as a layer (structural and cheap): what parity records calls of."""
    return decoder_shaped(module)
