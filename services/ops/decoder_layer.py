"""The wrapper every decoder-layer rewrite serves (the residual norm's, the parallel norm's):
`fn(hidden_states, input_norm, attention, post_norm, mlp, **passed)`, the layer's input, then its four children by
role, the layer's other inputs passed to its attention as they came (not the wrapper's parameters). Each family takes
these names as its own; services.ops.layer_contract.decoder_layer_contract binds them."""

from __future__ import annotations

ENTRY_INPUTS = ("hidden_states",)
ROLES = ("input_norm", "attention", "post_norm", "mlp")  # the wrapper's parameter for each child, in order
ENTRY_PARAMS = ("hidden_states", *ROLES)
OPTIONAL_PARAMS: tuple[str, ...] = ()
PASSES_INPUTS = True
PARAM_KINDS = {"hidden_states": "tensor", **{role: "module" for role in ROLES}}
ROLES_SAID = "input norm, attention, post norm and MLP"  # the roles as a refusal says them (LayerTemplate.roles_said)
