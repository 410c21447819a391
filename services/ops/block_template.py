"""An elementwise template: one kernel a variant, each program a block of elements (the gated MLP's act · up, a
plain MLP's activation). Its search space, its config check, its source and its launch plan are the same for every
family that writes one; the family says only its names, its kernels' sources and the arguments they take."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from services.core.pb import events_pb2 as pb
from services.ops import elementwise
from services.ops.layer_template import LayerTemplate

# Elements per program and warps, tried in this order (an elementwise pass: wide blocks, 4-8 warps).
BLOCKS = (2048, 1024, 4096)
NUM_WARPS = (4, 8)
SEARCH_TABLE: tuple[tuple[int, int], ...] = tuple((w, b) for b in BLOCKS for w in NUM_WARPS)


@dataclass(frozen=True)
class BlockTemplate(LayerTemplate):
    kernels: Mapping[str, str]  # variant -> its kernel's name
    sources: Mapping[str, str]  # variant -> its source, "@TEMPLATE@" standing for the template's name
    args: tuple[str, ...]  # the kernel's runtime arguments, in the family's vocabulary

    def search_configs(self, variant: str) -> list[pb.TemplateConfig]:
        return [
            pb.TemplateConfig(template=self.name, num_warps=w, variant=variant, params={"block": b})
            for w, b in SEARCH_TABLE
        ]

    def problem(self, config: pb.TemplateConfig) -> str:
        """Why `config` is not one of this template's ("" when it is): a known variant, a power-of-two block."""
        block = config.params.get("block", 0)
        warps = config.num_warps in (1, 2, 4, 8, 16, 32)
        fits = config.template == self.name and config.variant in self.variants and warps
        if fits and 0 < block <= elementwise.MAX_BLOCK and block & (block - 1) == 0:
            return ""
        return (
            f"not a {self.name} config: variant={config.variant!r} num_warps={config.num_warps} "
            f"params={dict(config.params)} (variants {tuple(self.variants)}; block a power of two)"
        )

    def render(self, config: pb.TemplateConfig) -> str:
        return self.sources[self.checked(config).variant].replace("@TEMPLATE@", self.name)

    def plan(self, config: pb.TemplateConfig) -> pb.LaunchPlan:
        block = self.checked(config).params["block"]
        launch = pb.KernelLaunch(
            kernel=self.kernels[config.variant],
            args=list(self.args),
            constexprs={"BLOCK": str(block)},
            grid=f"cdiv(n, {block})",
            num_warps=config.num_warps,
        )
        return pb.LaunchPlan(family=self.op.FAMILY, launches=[launch])
