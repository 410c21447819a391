"""The plain-MLP template (op family "plain_mlp"): the activation between an ungated MLP's two maps, one pass.

A candidate is data: `render(config)` is the kernel source (only @triton.jit code) and `plan(config)` how to
launch it in the family's vocabulary (services.ops.plain_mlp, whose wrapper runs the module's own maps around
it). GPT-2's gelu_new is seven torch ops, each rounding to the dtype and each a pass over the intermediate
activations; the kernel computes it in fp32 and rounds once (within the judge's bound of the eager module's own
answer, not bit for bit in bf16). Nemotron's relu² is two ops (a relu, then a square): the kernel squares in fp32
and rounds once, bit for bit torch's (a bf16 or fp16 value's square is exact in fp32; an fp32 one rounds once in
both).
"""

from __future__ import annotations

from services.core.pb import events_pb2 as pb
from services.ops import plain_mlp
from services.ops.block_template import BlockTemplate

TEMPLATE = "mlp_activation"
OP_FAMILY = plain_mlp.FAMILY
ENTRYPOINT = plain_mlp.ENTRYPOINT
VARIANTS = plain_mlp.WRITABLE
KERNELS = {"mlp_gelu_tanh": "_gelu_tanh_kernel", "mlp_relu2": "_relu2_kernel"}


def search_configs(
    variant: str = "mlp_gelu_tanh", width: int = 0, live_shape: tuple[int, ...] = ()
) -> list[pb.TemplateConfig]:
    """The gated template's table (an elementwise pass: wide blocks, 4-8 warps)."""
    return _BLOCKS.search_configs(variant)


_SOURCES = {
    "mlp_gelu_tanh": '''\
"""GPT-2's gelu_new between an MLP's maps (gpuyantra template @TEMPLATE@, variant mlp_gelu_tanh).

0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) in fp32, rounded once to the output dtype. One program covers
BLOCK elements.
"""

import triton
import triton.language as tl


@triton.jit
def _gelu_tanh_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    # tanh through exp (no tanh in every Triton's language), from exp(-2|z|) <= 1: nothing overflows
    t = tl.exp(-2.0 * tl.abs(inner))
    tanh = tl.where(inner >= 0, 1.0, -1.0) * (1.0 - t) / (1.0 + t)
    tl.store(y_ptr + offsets, (0.5 * x * (1.0 + tanh)).to(y_ptr.dtype.element_ty), mask=mask)
''',
    "mlp_relu2": '''\
"""Nemotron's relu² between an MLP's maps (gpuyantra template @TEMPLATE@, variant mlp_relu2).

max(x, 0)² in one pass, the square rounded once to the output dtype as torch's square rounds it. One program
covers BLOCK elements.
"""

import triton
import triton.language as tl


@triton.jit
def _relu2_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    r = tl.where(x < 0.0, 0.0, x)  # NaN stays NaN, as torch's relu keeps it (a maximum would drop it)
    tl.store(y_ptr + offsets, (r * r).to(y_ptr.dtype.element_ty), mask=mask)
''',
}

_BLOCKS = BlockTemplate(TEMPLATE, plain_mlp, "fc and proj", VARIANTS, KERNELS, _SOURCES, ("x", "y", "n"))
variant_for, contract_for = _BLOCKS.variant_for, _BLOCKS.contract_for
valid, render, plan = _BLOCKS.valid, _BLOCKS.render, _BLOCKS.plan
