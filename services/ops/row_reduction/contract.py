"""How a candidate kernel plugs into a live module class: derived from the module's introspection.

The contract names the entrypoint (the op family's wrapper), the forward inputs passed straight
through, and the module attributes bound to the wrapper's other parameters (read at call time by
`services.core.kernels.bind`, the one binder of the judge and the server).
"""

from __future__ import annotations

from services.core.pb import events_pb2 as pb
from services.ops.row_reduction import ENTRY_INPUTS, ENTRYPOINT, EPS_ATTRS

WEIGHT_KINDS = ("parameter", "tensor")


class ContractError(ValueError):
    """The live module does not fit the template's entrypoint."""


def _weight_attribute(intro: pb.ModuleIntrospection) -> pb.ModuleAttribute:
    params = [a for a in intro.attributes if a.kind == "parameter" and a.name != "bias"]
    if len(params) > 1:
        names = ", ".join(a.name for a in params)
        raise ContractError(f"{intro.class_path} has parameters {names}; a norm has one 1-D weight (and a bias)")
    tensors = params or [a for a in intro.attributes if a.kind in WEIGHT_KINDS and a.name != "bias"]
    one_d = [a for a in tensors if len(a.shape) == 1]
    if not one_d:
        raise ContractError(f"{intro.class_path} has no 1-D weight tensor to bind")
    named = [a for a in one_d if a.name == "weight"]
    if named:
        return named[0]
    if len(one_d) > 1:
        raise ContractError(f"{intro.class_path} has several 1-D tensors ({', '.join(a.name for a in one_d)})")
    return one_d[0]


def _bias_attribute(intro: pb.ModuleIntrospection, weight: pb.ModuleAttribute) -> pb.ModuleAttribute | None:
    """A LayerNorm's bias: a tensor named `bias` of the weight's shape (None for a norm without one)."""
    bias = next((a for a in intro.attributes if a.name == "bias" and a.kind in WEIGHT_KINDS), None)
    if bias is not None and list(bias.shape) != list(weight.shape):
        raise ContractError(f"{intro.class_path}.bias has shape {list(bias.shape)}, the weight {list(weight.shape)}")
    return bias


def _eps_attribute(intro: pb.ModuleIntrospection) -> pb.ModuleAttribute:
    floats = {a.name: a for a in intro.attributes if a.kind == "float"}
    for name in EPS_ATTRS:
        if name in floats:
            return floats[name]
    raise ContractError(f"{intro.class_path} has no float epsilon attribute (looked for {', '.join(EPS_ATTRS)})")


def derive_contract(intro: pb.ModuleIntrospection, entrypoint: str = ENTRYPOINT) -> pb.Contract:
    """The module_class contract binding `intro`'s weight, epsilon (and a LayerNorm's bias) to the norm entrypoint."""
    if not intro.class_path:
        raise ContractError("the introspection names no class")
    weight = _weight_attribute(intro)
    bias = _bias_attribute(intro, weight)
    eps = _eps_attribute(intro)
    inputs = list(intro.forward_params)
    if len(inputs) != len(ENTRY_INPUTS):
        raise ContractError(
            f"{intro.class_path}.forward takes ({', '.join(inputs)}); "
            f"the RMSNorm entrypoint takes ({', '.join(ENTRY_INPUTS)})"
        )
    # Names are the module's own business (Gemma's forward(x)): the inputs map to the entrypoint's by position.
    renamed = inputs != list(ENTRY_INPUTS)
    return pb.Contract(
        kind="module_class",
        target=intro.class_path,
        entrypoint=entrypoint,
        inputs=inputs,
        entry_inputs=list(ENTRY_INPUTS) if renamed else [],
        bindings=[
            pb.Binding(param="weight", attr=weight.name, kind="tensor"),
            pb.Binding(param="eps", attr=eps.name, kind="float"),
        ]
        + ([pb.Binding(param="bias", attr=bias.name, kind="tensor")] if bias is not None else []),
    )
