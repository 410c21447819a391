"""The gated-MLP template (op family "gated_mlp"): act(gate) · up in one pass over the intermediate.

A candidate is data: `render(config)` is the kernel source (only @triton.jit code), `plan(config)` how to
launch it in the family's vocabulary (services.ops.gated_mlp, whose wrapper runs the module's gate and up
projections, this kernel, then its down projection). The arithmetic follows the HF modules: the activation
of the gate is computed in fp32 as torch computes it (SiLU as x / (1 + exp(-x)); GELU's tanh form as
0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))), rounded to the gate's dtype as HF's separate op rounds it, then
multiplied by up in fp32 and rounded once more: what `act_fn(gate_proj(x)) * up_proj(x)` gives, in one pass.
"""

from __future__ import annotations

from services.core.pb import events_pb2 as pb
from services.ops import ContractRefused, elementwise, gated_mlp

TEMPLATE = "gated_elementwise"
OP_FAMILY = gated_mlp.FAMILY
ENTRYPOINT = gated_mlp.ENTRYPOINT
VARIANTS = ("swiglu", "geglu_tanh", "geglu")
KERNELS = {"swiglu": "_swiglu_kernel", "geglu_tanh": "_geglu_tanh_kernel", "geglu": "_geglu_kernel"}
# Elements per program and warps, tried in this order (an elementwise pass: wide blocks, 4-8 warps).
BLOCKS = (2048, 1024, 4096)
NUM_WARPS = (4, 8)
SEARCH_TABLE: tuple[tuple[int, int], ...] = tuple((w, b) for b in BLOCKS for w in NUM_WARPS)


def variant_for(computes: str) -> str | None:
    """The config variant that writes what a module was seen computing; None when this template cannot."""
    return computes if computes in VARIANTS else None


def contract_for(intro: pb.ModuleIntrospection, profile: pb.ModuleClassProfile) -> pb.Contract:
    """The layer contract: its children bound by the roles the profile recorded them running as."""
    contract = gated_mlp.layer_contract(intro.class_path, intro.forward_params, profile.roles)
    if contract is None:  # the reason recorded in TargetConcluded: replay re-derives it, word for word
        raise ContractRefused(f"{intro.class_path} has no recorded gate, up and down roles for a layer contract")
    return contract


def block_configs(template: str, variant: str, table=SEARCH_TABLE) -> list[pb.TemplateConfig]:
    """An elementwise template's search space (this one's, the plain MLP's) in the order it is tried."""
    return [pb.TemplateConfig(template=template, num_warps=w, variant=variant, params={"block": b}) for w, b in table]


def block_config_problem(config: pb.TemplateConfig, template: str, variants) -> str:
    """Why `config` is not one of an elementwise template's ("" when it is): a known variant, a power-of-two block."""
    block = config.params.get("block", 0)
    fits = config.template == template and config.variant in variants and config.num_warps in (1, 2, 4, 8, 16, 32)
    if fits and 0 < block <= elementwise.MAX_BLOCK and block & (block - 1) == 0:
        return ""
    return (
        f"not a {template} config: variant={config.variant!r} num_warps={config.num_warps} "
        f"params={dict(config.params)} (variants {tuple(variants)}; block a power of two)"
    )


def search_configs(
    variant: str = "swiglu", width: int = 0, live_shape: tuple[int, ...] = ()
) -> list[pb.TemplateConfig]:
    return block_configs(TEMPLATE, variant)


def valid(config: pb.TemplateConfig) -> bool:
    return not block_config_problem(config, TEMPLATE, VARIANTS)


def _checked(config: pb.TemplateConfig) -> pb.TemplateConfig:
    problem = block_config_problem(config, TEMPLATE, VARIANTS)
    if problem:
        raise ValueError(problem)
    return config


def render(config: pb.TemplateConfig) -> str:
    return _SOURCES[_checked(config).variant].replace("@TEMPLATE@", TEMPLATE)


def plan(config: pb.TemplateConfig) -> pb.LaunchPlan:
    block = _checked(config).params["block"]
    launch = pb.KernelLaunch(
        kernel=KERNELS[config.variant],
        args=["g", "u", "y", "n"],
        constexprs={"BLOCK": str(block)},
        grid=f"cdiv(n, {block})",
        num_warps=config.num_warps,
    )
    return pb.LaunchPlan(family=OP_FAMILY, launches=[launch])


# One kernel per activation, complete sources from one skeleton: only the lines that compute `act` differ.
_SKELETON = '''\
"""act(gate) * up for a gated MLP (gpuyantra template @TEMPLATE@, variant {variant}).

The activation in fp32 as torch computes it, rounded to the gate's dtype (HF applies it as its own op),
times up in fp32, rounded once to the output dtype. One program covers BLOCK elements.
"""

import triton
import triton.language as tl


@triton.jit
def {kernel}(g_ptr, u_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    g = tl.load(g_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(u_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
{activation}
    tl.store(y_ptr + offsets, (act * u).to(y_ptr.dtype.element_ty), mask=mask)
'''

_ACTIVATIONS = {
    "swiglu": """\
    act = (g / (1.0 + tl.exp(-g))).to(g_ptr.dtype.element_ty).to(tl.float32)""",
    "geglu_tanh": """\
    inner = 0.7978845608028654 * (g + 0.044715 * g * g * g)
    # tanh through exp (no tanh in every Triton's language), from exp(-2|z|) <= 1: nothing overflows
    t = tl.exp(-2.0 * tl.abs(inner))
    tanh = tl.where(inner >= 0, 1.0, -1.0) * (1.0 - t) / (1.0 + t)
    act = (0.5 * g * (1.0 + tanh)).to(g_ptr.dtype.element_ty).to(tl.float32)""",
    # torch's exact GELU: x · 0.5 · (1 + erf(x / sqrt(2))), erf in fp32
    "geglu": """\
    act = (g * 0.5 * (1.0 + tl.erf(g * 0.7071067811865476))).to(g_ptr.dtype.element_ty).to(tl.float32)""",
}
_SOURCES = {
    variant: _SKELETON.format(variant=variant, kernel=KERNELS[variant], activation=lines)
    for variant, lines in _ACTIVATIONS.items()
}
