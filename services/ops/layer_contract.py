"""The contract of a layer rewrite whose children are bound by role (the gated MLP's maps, the plain MLP's, a decoder
layer's four children): one builder, so every layer family binds its recorded roles the same way, and the decoder
rewrites (the residual norm's, the parallel norm's) ask the same of their norms."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from services.core.pb import events_pb2 as pb


def children_contract(
    family, class_path: str, forward_params: Sequence[str], roles: Mapping[str, str], form: Sequence[str] | None
) -> pb.Contract | None:
    """The layer contract of `family` (its op module: KIND, ENTRYPOINT, ENTRY_INPUTS) from what the profile recorded
    (pure: the coder derives it from the log): the forward's one input, and each child of the roles `form` bound by
    the attribute it was found running as; None when they do not fit (no form, or more than one input)."""
    params = list(forward_params)
    if len(params) != 1 or form is None:
        return None
    entry = list(family.ENTRY_INPUTS)
    return pb.Contract(
        kind=family.KIND,
        target=class_path,
        entrypoint=family.ENTRYPOINT,
        inputs=params,
        entry_inputs=entry if params != entry else [],
        bindings=[pb.Binding(param=role, attr=roles[role], kind="module") for role in form],
    )


def decoder_layer_contract(
    family, class_path: str, forward_params: Sequence[str], roles: Mapping[str, str]
) -> pb.Contract | None:
    """The contract of a decoder-layer rewrite (the residual norm's, the parallel norm's) from what the profile
    recorded: every input of the layer's forward passed through (a `**` input: other keywords too), the family's
    four children (`family.ROLES`) bound by the roles found running it; None when they do not fit."""
    params = list(forward_params)
    if not params or params[0].startswith("*") or sorted(roles) != sorted(family.ROLES):
        return None
    entry = ["hidden_states", *params[1:]] if params[0] != "hidden_states" else []
    return pb.Contract(
        kind=family.KIND,
        target=class_path,
        entrypoint=family.ENTRYPOINT,
        inputs=params,
        entry_inputs=entry,
        bindings=[pb.Binding(param=role, attr=roles[role], kind="module") for role in family.ROLES],
    )


def live_decoder_contract(family, module, class_path: str) -> pb.Contract | None:
    """The layer contract of a live decoder layer of `family` (the residual norm's, the parallel norm's): its
    forward's inputs, its four children bound by the roles `family.roles_of` finds running it."""
    from services.server.introspection import forward_params

    return decoder_layer_contract(family, class_path, forward_params(type(module)), family.roles_of(module))


def norms_of_one_width(shapes: Mapping[str, tuple[int, ...]]) -> str:
    """Why a decoder-layer rewrite's children with these weight shapes ({role: shape}, () where a child has none of
    its own) cannot be its ("" when they can): its input and post norms must be norms of one width."""
    first, second = (tuple(shapes.get(role, ())) for role in ("input_norm", "post_norm"))
    if len(first) != 1 or first != second:
        return f"the input and post norms must be norms of one width (weights {list(first)} and {list(second)})"
    return ""
