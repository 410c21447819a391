"""Op families: everything specific to one op, behind one seam every service dispatches through.

A family owns the vocabulary its candidates' launch plans are written in, the host wrapper that
runs a plan (the same code in the judge's child and the server: no candidate-authored host Python
runs anywhere), the signature that wrapper offers a contract, and the bytes a call moves.
"""

from __future__ import annotations

from types import ModuleType

from services.ops import gated_mlp, plain_mlp, residual_norm, rotary, row_reduction

FAMILIES: dict[str, ModuleType] = {
    row_reduction.FAMILY: row_reduction,
    gated_mlp.FAMILY: gated_mlp,
    rotary.FAMILY: rotary,
    residual_norm.FAMILY: residual_norm,
    plain_mlp.FAMILY: plain_mlp,
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


def family(name: str) -> ModuleType:
    try:
        return FAMILIES[name]
    except KeyError:
        known = ", ".join(sorted(FAMILIES))
        raise UnknownFamily(f"no op family {name!r} (known: {known})") from None


def recognise(module) -> tuple[str, str] | None:
    """(family, variant) of what a live module computes, asked of every family; None when none knows it."""
    for name, fam in FAMILIES.items():
        variant = fam.recognise(module)
        if variant:
            return name, variant
    return None


def family_of(computes: str) -> str | None:
    """The family whose variant a module was seen computing (ModuleClassProfile.computes); None for "" or unknown."""
    return next((name for name, fam in FAMILIES.items() if computes and computes in fam.VARIANTS), None)


def rewrites_layer(module) -> bool:
    """Whether an op family could rewrite `module` as a layer (its children kept): a gated MLP's shape, a decoder
    layer's, a plain MLP's. Structural and cheap (a norm child's probe at most): what parity records calls of
    beside leaves."""
    return gated_mlp.shaped(module) or plain_mlp.recognise(module) is not None or residual_norm.decoder_shaped(module)
