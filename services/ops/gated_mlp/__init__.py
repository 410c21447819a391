"""The gated-MLP op family (SwiGLU, GeGLU): recognition, the launch vocabulary and the layer wrapper.

A gated MLP computes down(act(gate(x)) · up(x)) with three linear maps: Llama, Qwen2/3, Mistral and Cohere
with SiLU, Gemma with tanh-approximated GELU. The family fuses act(gate) · up into one pass over the
intermediate activations, as a rewrite of the MLP's forward that keeps its projections (a `layer` target:
`contract_for` binds the module's three maps by role, `make_forward` runs gate and up, the plan's kernel,
then down; the server swaps it with parity like any other, tests/ops/gated_mlp/test_gated_swap.py). It says what a
live module computes by running it, so the profile names a model's MLP for what it is
(`ModuleClassProfile.computes`, and the children's `roles`) whatever its class or attribute names. The
judge judges the op itself, `make_op` (act(gate) · up on operand pairs against `reference`, torch's own;
services/judge/pair_cases.py), with the bytes and the read/write mix the family declares (`timed_bytes`,
`READS_PER_WRITE`); the profiler ranks the layer by its time outside the projections it keeps
(services/profiler/roofline.layer_op); `layer_contract` is what the coder binds from the recorded roles.

Which two maps are the gate and the up projection, and which the down, is read from their shapes (gate and
up take the hidden width to the intermediate one, down takes it back); which of the first two is the gate,
and which activation, from running the module's own forward on probe rows beside each candidate formula.

Phi-3 and GLM fuse gate and up into one map to twice the intermediate width and chunk its output (gate
first). Its halves are strided views that a one-pass kernel would have to copy, so the rewrite runs each half
of the fused weight as its own map (two GEMMs on contiguous weight rows, no copy) and the kernel on their
contiguous outputs: the same op, judged the same way; only plain `torch.nn.Linear` maps are taken so (a
quantised or adapted map's forward is not its weight).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping

from services.core.pb import events_pb2 as pb
from services.ops import elementwise

FAMILY = "gated_mlp"
VARIANTS = ("swiglu", "geglu_tanh", "geglu")
WRITABLE = VARIANTS
PROBE_ROWS = 4


def _activations():
    import torch.nn.functional as F

    return {
        "swiglu": F.silu,
        "geglu_tanh": lambda t: F.gelu(t, approximate="tanh"),
        "geglu": F.gelu,
    }


def linear_maps(module, count: int) -> dict | None:
    """{name: child} of the module's children that are linear maps (leaves with a 2-D weight), or None unless there
    are exactly `count` of them (a gated MLP has three, a plain MLP two)."""
    import torch

    maps = {}
    for name, child in module.named_children():
        weight = getattr(child, "weight", None)
        if isinstance(weight, torch.Tensor) and weight.dim() == 2:
            if any(True for _ in child.children()):
                return None
            maps[name] = child
    return maps if len(maps) == count else None


def roles(module) -> tuple[str, str, str] | None:
    """(one of gate/up, the other, down) by shape: two maps of one shape, and a third of the transposed shape."""
    maps = linear_maps(module, 3)
    if maps is None:
        return None
    shapes = {name: tuple(child.weight.shape) for name, child in maps.items()}
    for down, shape in shapes.items():
        pair = [n for n in shapes if n != down]
        if shapes[pair[0]] == shapes[pair[1]] == shape[::-1] and shape[0] != shape[1]:
            return pair[0], pair[1], down
    return None


def fused_roles(module) -> tuple[str, str] | None:
    """(gate_up, down) of a fused gated MLP by shape: a plain Linear to twice the width the other takes back."""
    import torch

    maps = linear_maps(module, 2)
    if maps is None or any(type(child) is not torch.nn.Linear for child in maps.values()):
        return None
    shapes = {name: tuple(child.weight.shape) for name, child in maps.items()}
    for down, (hidden, width) in shapes.items():
        (gate_up,) = (n for n in shapes if n != down)
        if shapes[gate_up] == (2 * width, hidden):
            return gate_up, down
    return None


def _probed(module, down: str):
    """(its children, the down map's weight, probe rows, the module's output on them in fp32), or None when its
    forward does not act as an MLP of the down map's width."""
    import torch

    maps = dict(module.named_children())
    weight = maps[down].weight
    hidden = int(weight.shape[0])
    gen = torch.Generator().manual_seed(hidden)
    probe = torch.randn(PROBE_ROWS, hidden, generator=gen).to(weight.device, weight.dtype)
    with torch.inference_mode():
        try:
            got = module(probe)
        except Exception:  # a forward that wants more than the hidden states is not an MLP of this shape
            return None
    if not isinstance(got, torch.Tensor) or got.shape != probe.shape:
        return None
    return maps, weight, probe, got.float()


def _closest(got, candidates: dict, dtype) -> tuple | None:
    """The key of the candidate output nearest `got`, when within one rounding of the dtype (relative)."""
    from services.ops.recognise_norm import TOLERANCE

    scale = max(1e-6, float(got.abs().max()))
    errors = {key: float((got - value).abs().max()) / scale for key, value in candidates.items()}
    key, error = min(errors.items(), key=lambda kv: kv[1])
    return key if error <= TOLERANCE.get(dtype, 1e-3) else None


def identify_fused(module) -> tuple[str, str, str] | None:
    """(variant, gate_up, down) of a fused gated MLP whose first half is the gate; None otherwise. Runs it once."""
    import torch

    found = fused_roles(module)
    if found is None:
        return None
    gate_up, down = found
    probed = _probed(module, down)
    if probed is None:
        return None
    maps, weight, probe, got = probed
    with torch.inference_mode():
        g, u = maps[gate_up](probe).float().chunk(2, dim=-1)
        candidates = {
            variant: maps[down]((act(g) * u).to(weight.dtype)).float() for variant, act in _activations().items()
        }
    variant = _closest(got, candidates, weight.dtype)
    return (variant, gate_up, down) if variant else None


def identify(module) -> tuple[str, str, str, str] | None:
    """(variant, gate, up, down) of a gated MLP, the roles by child name; None when `module` is not one.
    Runs its forward once on probe rows."""
    import torch

    found = roles(module)
    if found is None:
        return None
    first, second, down = found
    probed = _probed(module, down)
    if probed is None:
        return None
    maps, weight, probe, got = probed
    with torch.inference_mode():
        candidates = {}
        for gate, up in ((first, second), (second, first)):
            g, u = maps[gate](probe).float(), maps[up](probe).float()
            for variant, act in _activations().items():
                candidates[variant, gate, up] = maps[down]((act(g) * u).to(weight.dtype)).float()
    key = _closest(got, candidates, weight.dtype)
    return (*key, down) if key else None


ROLES = ("gate_proj", "up_proj", "down_proj")  # the wrapper's parameter for each map, in identify()'s order
FUSED_ROLES = ("gate_up_proj", "down_proj")  # the fused form's (identify_fused's order)


def _found(module) -> tuple[str, dict[str, str]] | None:
    """(variant, {wrapper parameter: child attribute}) of either form, found by running it; None otherwise."""
    three = identify(module)
    if three:
        return three[0], dict(zip(ROLES, three[1:], strict=True))
    fused = identify_fused(module)
    return (fused[0], dict(zip(FUSED_ROLES, fused[1:], strict=True))) if fused else None


def recognise(module) -> str | None:
    """The variant `module` computes (see VARIANTS), or None."""
    found = _found(module)
    return found[0] if found else None


def roles_of(module) -> dict[str, str]:
    """{wrapper parameter: child attribute} of a gated MLP, found by running it; {} when it is not one."""
    found = _found(module)
    return found[1] if found else {}


def shaped(module) -> bool:
    """Structural and cheap: whether `module` has the maps of either form (ops.rewrites_layer)."""
    return roles(module) is not None or fused_roles(module) is not None


def reference(variant: str):
    """What the HF module computes between its projections, as torch computes it: act(gate) * up, each op
    rounding to the tensors' dtype (the oracle the judge holds a candidate to, in fp32 and in the live dtype)."""
    act = _activations()[variant]
    return lambda g, u: act(g) * u


def bytes_moved(elements: int, itemsize: int) -> int:
    """Bytes one fused call must move at least: gate and up read, the product written."""
    return 3 * elements * itemsize


def timed_bytes(dims: list[int], itemsizes: tuple[int, int, int]) -> int:
    """Bytes a call on a timed input must move: the judge times (gate, up) stacked as one (2, ..., width) tensor."""
    elements = 1
    for d in dims[1:]:
        elements *= d
    return bytes_moved(elements, itemsizes[0])


def unfused_bytes(elements: int, itemsize: int) -> int:
    """What torch's two ops move: the activation reads the gate and writes it; the product reads two, writes one."""
    return 5 * elements * itemsize


# ---------------------------------------------------------------- launch plans and the layer wrapper

KIND = "layer"  # the target is the MLP module, whose forward is rewritten keeping its projections
ENTRYPOINT = "gated_mlp"
ENTRY_INPUTS = ("hidden_states",)
ENTRY_PARAMS = ("hidden_states", "gate_proj", "up_proj", "down_proj", "gate_up_proj")
# A contract binds gate and up, or the fused gate_up (roles_problem says which sets fit).
OPTIONAL_PARAMS: tuple[str, ...] = ("gate_proj", "up_proj", "gate_up_proj")
PARAM_KINDS = {"hidden_states": "tensor", "gate_up_proj": "module"} | dict.fromkeys(ROLES, "module")
# Runtime arguments a kernel may take: the gate's and the up projection's outputs (same shape, contiguous),
# the output, and their element count. One program covers N elements.
ARGS = ("g", "u", "y", "n")
ARG_ROLES = {"g": "input", "u": "input", "y": "output", "n": "count"}
GRIDS = elementwise.GRIDS
MAX_BLOCK = elementwise.MAX_BLOCK
READS_PER_WRITE = 2  # gate and up read for each product written: the judge's floor is at that mix's ceiling
parse_grid = elementwise.parse_grid


def check_plan(plan: pb.LaunchPlan, kernels: Mapping) -> list[pb.Finding]:
    """Findings (rule `launch-plan`) for a plan of this family; [] when it fits. One launch serves every size."""
    return elementwise.check_plan(plan, kernels, FAMILY, ARGS)


def make_op(plan: pb.LaunchPlan, kernels: Mapping[str, Callable], *, empty=None, launch: bool = True) -> Callable:
    """gated(g, u) -> act(g) * u with the plan's kernel (checked by `check_plan`): the op the judge judges and
    the layer wrapper runs between the projections.

    `empty` allocates the output (torch.empty's signature); `launch=False` skips the kernel (the judge's ghost
    replay)."""
    import torch

    run = elementwise.Launch(plan, kernels)
    allocate = empty or torch.empty

    def gated(g, u):
        if not isinstance(g, torch.Tensor) or not isinstance(u, torch.Tensor) or g.shape != u.shape:
            raise ValueError("the gate and up projections must give tensors of one shape")
        if not g.dtype.is_floating_point or g.device != u.device or g.dtype != u.dtype:
            raise TypeError(f"gate and up must be floating tensors of one dtype on one device, got {g.dtype} on "
                            f"{g.device} and {u.dtype} on {u.device}")  # fmt: skip
        g = g if g.is_contiguous() else g.contiguous()
        u = u if u.is_contiguous() else u.contiguous()
        y = allocate(g.shape, dtype=g.dtype, device=g.device)
        n = g.numel()
        if n and launch:
            run({"g": g, "u": u, "y": y, "n": n}, n)
        return y

    gated.launchers = [run.launcher]
    return gated


def make_forward(plan: pb.LaunchPlan, kernels: Mapping[str, Callable], *, empty=None, launch: bool = True) -> Callable:
    """gated_mlp(hidden_states, gate_proj, up_proj, down_proj): down(kernel(gate(x), up(x))), the op of `make_op`
    between the module's own projections."""
    op = make_op(plan, kernels, empty=empty, launch=launch)

    import torch.nn.functional as F

    def gated_mlp(hidden_states, down_proj, gate_proj=None, up_proj=None, gate_up_proj=None):
        if gate_up_proj is None:
            return down_proj(op(gate_proj(hidden_states), up_proj(hidden_states)))
        # the fused map's halves as two maps: contiguous weight rows, contiguous outputs (no chunk, no copy)
        weight, bias = gate_up_proj.weight, gate_up_proj.bias
        half = weight.shape[0] // 2
        gate = F.linear(hidden_states, weight[:half], None if bias is None else bias[:half])
        up = F.linear(hidden_states, weight[half:], None if bias is None else bias[half:])
        return down_proj(op(gate, up))

    gated_mlp.launchers = op.launchers
    return gated_mlp


def contract_for(module, class_path: str) -> pb.Contract | None:
    """The layer contract of a live gated MLP: its forward's input, and its maps (three, or the fused two) bound
    by role (found by running it); None when it is not a gated MLP this family recognises."""
    import inspect

    roles = roles_of(module)
    params = [p for p in inspect.signature(type(module).forward).parameters if p != "self"]
    return layer_contract(class_path, params, roles)


def roles_problem(shapes: Mapping[str, tuple[int, ...]]) -> str:
    """Why maps of these weight shapes ({role: [out, in]}) cannot be a gated MLP's gate, up and down ("" when
    they can)."""
    if "gate_up_proj" in shapes:
        fused, down = (tuple(shapes.get(role, ())) for role in FUSED_ROLES)
        if sorted(shapes) != sorted(FUSED_ROLES) or len(fused) != 2 or len(down) != 2:
            return f"a fused gated MLP binds gate_up_proj and down_proj, each a 2-D weight (got {dict(shapes)})"
        if fused != (2 * down[1], down[0]):  # unambiguous even where the widths are equal
            return f"gate_up {list(fused)} must map the hidden width to twice the intermediate, down {list(down)} back"
        return ""
    gate, up, down = (tuple(shapes.get(role, ())) for role in ROLES)
    if len(gate) != 2 or len(up) != 2 or len(down) != 2:
        return f"gate, up and down must each be a linear map with a 2-D weight (shapes {gate}, {up}, {down})"
    if gate != up or down != gate[::-1] or gate[0] == gate[1]:
        return (
            f"gate {list(gate)} and up {list(up)} must map the hidden width to the intermediate, down {list(down)} back"
        )
    return ""


def intermediate_width(shapes: Mapping[str, tuple[int, ...]]) -> int:
    """The width the kernel's operands have: the gate's output features (half the fused map's)."""
    if "gate_up_proj" in shapes:
        return int(tuple(shapes["gate_up_proj"])[0]) // 2
    return int(tuple(shapes["gate_proj"])[0])


def layer_contract(class_path: str, forward_params, roles: Mapping[str, str]) -> pb.Contract | None:
    """The layer contract from what the profile recorded: the forward's one input, and the three maps (or the fused
    map and down) bound by the roles found running it; None when they do not fit."""
    from services.ops.layer_contract import children_contract

    form = next((form for form in (ROLES, FUSED_ROLES) if sorted(roles) == sorted(form)), None)
    return children_contract(sys.modules[__name__], class_path, forward_params, roles, form)


def layer_shaped(module) -> bool:
    """Whether this family could rewrite `module` as a layer (structural and cheap): what parity records calls of."""
    return shaped(module)
