"""Kernel templates the coder can render, by op family: the norms', the gated MLP's, RoPE's, the residual
norm's, the plain MLP's activation."""

from __future__ import annotations

from services.coder.templates import add_norm, gated, mlp_act, rmsnorm, rotary

# op family -> the template module the coder offers its targets
BY_FAMILY = {
    rmsnorm.OP_FAMILY: rmsnorm, gated.OP_FAMILY: gated, rotary.OP_FAMILY: rotary, add_norm.OP_FAMILY: add_norm,
    mlp_act.OP_FAMILY: mlp_act,
}  # fmt: skip
# template name (TemplateConfig.template) -> the template module rendering it
BY_TEMPLATE = {
    rmsnorm.TEMPLATE: rmsnorm, gated.TEMPLATE: gated, rotary.TEMPLATE: rotary, add_norm.TEMPLATE: add_norm,
    mlp_act.TEMPLATE: mlp_act,
}  # fmt: skip
