"""Kernel templates the coder can render, by op family (today: RMSNorm for "row_reduction")."""

from __future__ import annotations

from services.coder.templates import rmsnorm

# op family -> the template module serving it
BY_FAMILY = {rmsnorm.OP_FAMILY: rmsnorm}
# template name (TemplateConfig.template) -> the template module rendering it
BY_TEMPLATE = {rmsnorm.TEMPLATE: rmsnorm}
