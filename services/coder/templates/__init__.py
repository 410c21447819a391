"""Kernel templates the coder can render, by op family (today: RMSNorm for "row_reduction")."""

from __future__ import annotations

from services.coder.templates import gated, rmsnorm

# op family -> the template module the coder offers its targets (the gated MLP's joins once the judge and the
# profiler take layer targets)
BY_FAMILY = {rmsnorm.OP_FAMILY: rmsnorm}
# template name (TemplateConfig.template) -> the template module rendering it
BY_TEMPLATE = {rmsnorm.TEMPLATE: rmsnorm, gated.TEMPLATE: gated}
