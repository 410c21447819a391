"""Kernel templates the coder can render, by op family: the norms', the gated MLP's and RoPE's."""

from __future__ import annotations

from services.coder.templates import gated, rmsnorm, rotary

# op family -> the template module the coder offers its targets
BY_FAMILY = {rmsnorm.OP_FAMILY: rmsnorm, gated.OP_FAMILY: gated, rotary.OP_FAMILY: rotary}
# template name (TemplateConfig.template) -> the template module rendering it
BY_TEMPLATE = {rmsnorm.TEMPLATE: rmsnorm, gated.TEMPLATE: gated, rotary.TEMPLATE: rotary}
