"""The plain-MLP op family: proj(act(fc(x))) with its activation fused into one pass, as a layer rewrite.

A plain (ungated) MLP — GPT-2's `c_fc → gelu_new → c_proj`, and any two-map MLP like it — spends its time
outside the projections in the activation, and HF's tanh-approximated GELU (`NewGELUActivation`) is seven
elementwise torch ops over the intermediate activations, each reading and writing them: at GPT-2's widths that is
~7× the bytes the activation needs, and seven launches at decode. This family fuses the activation into one pass
as a rewrite of the MLP's forward that keeps its two maps and its (eval-time identity) dropout. It says what a
live MLP computes by running it — never from class or attribute names: the two children with 2-D weights are the
maps (which is first is whichever takes the hidden width), and the activation is whichever formula, applied
between them, reproduces the module's own output.

The judge judges the op, `make_op` (act(x) on single operands drawn like the gated pair's; the oracle torch's
own formula in the live dtype and in float64, services.judge.verdict.unary_references), with the bytes the family
declares (`timed_bytes`); the profiler ranks the layer by its time outside the maps it keeps.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping

from services.core.pb import events_pb2 as pb
from services.ops import elementwise
from services.ops.gated_mlp import linear_maps

FAMILY = "plain_mlp"
VARIANTS = ("mlp_gelu_tanh", "mlp_gelu", "mlp_relu", "mlp_silu", "mlp_relu2")
# the others are recognised, recorded and refused with that reason (torch runs each as one kernel already);
# relu² (Nemotron's) is two, a relu and a square, each a pass over the activations
WRITABLE = ("mlp_gelu_tanh", "mlp_relu2")
KIND = "layer"
ENTRYPOINT = "plain_mlp"
ENTRY_INPUTS = ("hidden_states",)
ROLES = ("fc", "proj")  # the wrapper's parameter for each map, in identify()'s order
ENTRY_PARAMS = ("hidden_states", *ROLES)
OPTIONAL_PARAMS: tuple[str, ...] = ()
PARAM_KINDS = {"hidden_states": "tensor", "fc": "module", "proj": "module"}
# Runtime arguments a kernel may take: the first map's output (contiguous), the output, their element count.
ARGS = ("x", "y", "n")
ARG_ROLES = {"x": "input", "y": "output", "n": "count"}
GRIDS = elementwise.GRIDS
MAX_BLOCK = elementwise.MAX_BLOCK
READS_PER_WRITE = 1
PROBE_ROWS = 4


def _activations() -> dict[str, Callable]:
    """Each variant as HF's modules compute it, op by op in the tensor's dtype (GPT-2's gelu_new: seven ops;
    Nemotron's relu²: two)."""
    import torch
    import torch.nn.functional as F

    def gelu_new(x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))

    def relu2(x):  # Nemotron's ReLUSquaredActivation
        return torch.square(F.relu(x))

    return {"mlp_gelu_tanh": gelu_new, "mlp_gelu": F.gelu, "mlp_relu": F.relu, "mlp_silu": F.silu, "mlp_relu2": relu2}


def reference(variant: str) -> Callable:
    """act(x) as the HF module computes it (the judge's oracle, in the live dtype and in float64)."""
    if variant not in VARIANTS:
        raise ValueError(f"no plain-MLP variant {variant!r} (known: {', '.join(VARIANTS)})")
    return _activations()[variant]


def maps_of(module) -> dict | None:
    """{name: child} of the module's two children with 2-D weights (its maps), or None when it has not two."""
    return linear_maps(module, 2)


def identify(module) -> tuple[str, str, str] | None:
    """(variant, fc, proj) of a plain MLP, the maps by child name; None when `module` is not one. Runs its forward
    on probe rows (and each map on them, to find which takes the hidden width)."""
    import torch

    maps = maps_of(module)
    if maps is None:
        return None
    some = next(iter(maps.values())).weight
    for fc, proj in ((a, b) for a in maps for b in maps if a != b):
        for hidden in sorted(set(maps[fc].weight.shape)):
            gen = torch.Generator().manual_seed(hidden)
            probe = (torch.randn(PROBE_ROWS, hidden, generator=gen) * 2.0).to(some.device, some.dtype)
            with torch.inference_mode():
                try:
                    got = module(probe)
                    inner = maps[fc](probe)
                    if not isinstance(got, torch.Tensor) or got.shape != probe.shape or inner.shape == probe.shape:
                        continue
                    expected = {v: maps[proj](act(inner)) for v, act in _activations().items()}
                except Exception:  # this order or width does not fit the maps: not it
                    continue
            from services.ops.recognise_norm import TOLERANCE

            scale = max(1e-6, float(got.float().abs().max()))
            errors = {v: float((got.float() - e.float()).abs().max()) / scale for v, e in expected.items()}
            variant, error = min(errors.items(), key=lambda kv: kv[1])
            if error <= TOLERANCE.get(some.dtype, 1e-3):
                return variant, fc, proj
    return None


def recognise(module) -> str | None:
    """The variant `module` computes (see VARIANTS), or None."""
    found = identify(module) if maps_of(module) is not None else None
    return found[0] if found else None


def roles_of(module) -> dict[str, str]:
    """{wrapper parameter: child attribute} of a plain MLP, found by running it; {} when it is not one."""
    found = identify(module)
    return dict(zip(ROLES, found[1:], strict=True)) if found else {}


def bytes_moved(elements: int, itemsize: int) -> int:
    """Bytes one fused call must move at least: the first map's output read, the activation written."""
    return 2 * elements * itemsize


def timed_bytes(dims: list[int], itemsizes: tuple[int, int, int]) -> int:
    """Bytes a call on a timed input of shape `dims` must move."""
    return bytes_moved(math.prod(dims), itemsizes[0])


# ---------------------------------------------------------------- launch plans and the layer wrapper


parse_grid = elementwise.parse_grid


def check_plan(plan: pb.LaunchPlan, kernels: Mapping) -> list[pb.Finding]:
    """Findings (rule `launch-plan`) for a plan of this family; [] when it fits. One launch serves every size."""
    return elementwise.check_plan(plan, kernels, FAMILY, ARGS)


def make_op(plan: pb.LaunchPlan, kernels: Mapping[str, Callable], *, empty=None, launch: bool = True) -> Callable:
    """act(x) with the plan's kernel (checked by `check_plan`): the op the judge judges and the layer wrapper runs
    between the maps. `empty` allocates the output; `launch=False` skips the kernel (the judge's ghost replay)."""
    import torch

    run = elementwise.Launch(plan, kernels)
    allocate = empty or torch.empty

    def act(x):
        if not isinstance(x, torch.Tensor) or not x.dtype.is_floating_point:
            raise TypeError(f"the activation takes a floating tensor, got {getattr(x, 'dtype', type(x).__name__)}")
        x = x if x.is_contiguous() else x.contiguous()
        y = allocate(x.shape, dtype=x.dtype, device=x.device)
        n = x.numel()
        if n and launch:
            run({"x": x, "y": y, "n": n}, n)
        return y

    act.launchers = [run.launcher]
    return act


def make_forward(plan: pb.LaunchPlan, kernels: Mapping[str, Callable], *, empty=None, launch: bool = True) -> Callable:
    """plain_mlp(hidden_states, fc, proj): proj(kernel(fc(x))), the op of `make_op` between the module's own maps.
    (The module's dropout is the identity in eval, where a server runs.)"""
    op = make_op(plan, kernels, empty=empty, launch=launch)

    def plain_mlp(hidden_states, fc, proj):
        return proj(op(fc(hidden_states)))

    plain_mlp.launchers = op.launchers
    return plain_mlp


def roles_problem(shapes: Mapping[str, tuple[int, ...]]) -> str:
    """Why maps of these weight shapes ({role: shape}) cannot be a plain MLP's fc and proj ("" when they can): two
    2-D maps whose shapes are each other's transpose (a Linear's [out, in] or a Conv1D's [in, out]), not square."""
    fc, proj = (tuple(shapes.get(role, ())) for role in ROLES)
    if len(fc) != 2 or len(proj) != 2 or fc != proj[::-1] or fc[0] == fc[1]:
        return f"fc {list(fc)} and proj {list(proj)} must be two maps, one the other's transpose, not square"
    return ""


def intermediate_width(shapes: Mapping[str, tuple[int, ...]], hidden: int) -> int:
    """The width the kernel's operand has: the fc map's dimension that is not the hidden width."""
    fc = tuple(shapes["fc"])
    return int(fc[1] if fc[0] == hidden else fc[0])


def layer_contract(class_path: str, forward_params, roles: Mapping[str, str]) -> pb.Contract | None:
    """The layer contract from what the profile recorded: the forward's one input, the two maps bound by the roles
    found running it; None when they do not fit."""
    from services.ops.layer_contract import children_contract

    form = ROLES if sorted(roles) == sorted(ROLES) else None
    return children_contract(sys.modules[__name__], class_path, forward_params, roles, form)


def contract_for(module, class_path: str) -> pb.Contract | None:
    """The layer contract of a live plain MLP (its forward's input, its two maps by role)."""
    from services.server.introspection import forward_params

    return layer_contract(class_path, forward_params(type(module)), roles_of(module))


def layer_shaped(module) -> bool:
    """Whether this family could rewrite `module` as a layer (its maps found by running it): what parity records
    calls of."""
    return recognise(module) is not None
