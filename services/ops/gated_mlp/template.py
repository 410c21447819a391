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
from services.ops import gated_mlp
from services.ops.block_template import BlockTemplate

TEMPLATE = "gated_elementwise"
OP_FAMILY = gated_mlp.FAMILY
ENTRYPOINT = gated_mlp.ENTRYPOINT
VARIANTS = ("swiglu", "geglu_tanh", "geglu")
KERNELS = {"swiglu": "_swiglu_kernel", "geglu_tanh": "_geglu_tanh_kernel", "geglu": "_geglu_kernel"}


def search_configs(
    variant: str = "swiglu", width: int = 0, live_shape: tuple[int, ...] = ()
) -> list[pb.TemplateConfig]:
    return _BLOCKS.search_configs(variant)


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

_BLOCKS = BlockTemplate(TEMPLATE, gated_mlp, "gate, up and down", VARIANTS, KERNELS, _SOURCES, ("g", "u", "y", "n"))
variant_for, contract_for = _BLOCKS.variant_for, _BLOCKS.contract_for
valid, render, plan = _BLOCKS.valid, _BLOCKS.render, _BLOCKS.plan
