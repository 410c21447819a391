"""Op families: everything specific to one op, behind one seam every service dispatches through.

A family owns the vocabulary its candidates' launch plans are written in, the host wrapper that
runs a plan (the same code in the judge's child and the server: no candidate-authored host Python
runs anywhere), the signature that wrapper offers a contract, and the bytes a call moves.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from services.ops.protocol import FamilyJudging, FamilyPhysics, FamilyTemplate

from services.ops import gated_mlp, parallel_norm, plain_mlp, residual_norm, rotary, row_reduction

FAMILIES: dict[str, ModuleType] = {
    row_reduction.FAMILY: row_reduction,
    gated_mlp.FAMILY: gated_mlp,
    rotary.FAMILY: rotary,
    residual_norm.FAMILY: residual_norm,
    plain_mlp.FAMILY: plain_mlp,
    parallel_norm.FAMILY: parallel_norm,
}


class Answered(RuntimeError):
    """A layer rewrite's kernel failed after a child with state had run (a decoder layer's attention appends to
    the KV cache): the rewrite answered the call with torch's own ops instead, and `answer` is that answer. The
    server's fallback uses it rather than running the layer a second time; the failure still reverts the swap."""

    def __init__(self, answer, cause: Exception):
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.answer = answer


class UnknownFamily(ValueError):
    """A launch plan names an op family this system has no wrapper for."""


class ContractRefused(ValueError):
    """A family's template cannot bind a live target to its wrapper (`contract_for`). The text is the reason the
    coder concludes the target with, recorded in TargetConcluded and re-derived by replay: a target refused today
    must be refused in the same words."""


# The family a target the profiler did not rank is tried as: a norm, whose contract derivation decides whether the
# module fits. A norm's roofline class (Fingerprint.op_family) and its family share the name.
UNRANKED = row_reduction.FAMILY


def family(name: str) -> ModuleType:
    try:
        return FAMILIES[name]
    except KeyError:
        known = ", ".join(sorted(FAMILIES))
        raise UnknownFamily(f"no op family {name!r} (known: {known})") from None


def judging(name: str) -> FamilyJudging:
    """The family's `judging` module (services.ops.protocol.FamilyJudging): imported only by the judge, on demand."""
    family(name)
    return importlib.import_module(f"services.ops.{name}.judging")


def template(name: str) -> FamilyTemplate:
    """The family's `template` module (services.ops.protocol.FamilyTemplate): imported by the coder, on demand."""
    family(name)
    return importlib.import_module(f"services.ops.{name}.template")


def template_family(template_name: str) -> str | None:
    """The family whose template renders configs named `template_name` (TemplateConfig.template); None for ""
    (an LLM author's candidate has no config) or a name no family's template carries."""
    return next((name for name in FAMILIES if template_name and template(name).TEMPLATE == template_name), None)


def physics(name: str) -> FamilyPhysics:
    """The family's `physics` module (services.ops.protocol.FamilyPhysics): what the profiler ranks it by."""
    family(name)
    return importlib.import_module(f"services.ops.{name}.physics")


def recognise(module) -> tuple[str, str] | None:
    """(family, variant) of what a live module computes, asked of every family; None when none knows it."""
    for name, fam in FAMILIES.items():
        variant = fam.recognise(module)
        if variant:
            return name, variant
    return None


def functions_in(module) -> dict:
    """{"package.module.function": what it computes and how it is called} of every function a function family
    recognises in the Python module `module` (a model's modeling file): RoPE's `find_ropes`, by its `recognised`."""
    found: dict = {}
    for fam in FAMILIES.values():
        if fam.KIND == "function":
            found.update(fam.recognised_functions(module))
    return found


def family_of(computes: str) -> str | None:
    """The family whose variant a module was seen computing (ModuleClassProfile.computes); None for "" or unknown."""
    return next((name for name, fam in FAMILIES.items() if computes and computes in fam.VARIANTS), None)


def rewrites_layer(module) -> bool:
    """Whether an op family could rewrite `module` as a layer (its children kept): each layer family's `layer_shaped`
    (a gated MLP's shape, a decoder layer's, a plain MLP's). Structural and cheap (a norm child's probe at most):
    what parity records calls of beside leaves."""
    return any(fam.layer_shaped(module) for fam in FAMILIES.values() if fam.KIND == "layer")
