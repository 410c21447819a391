"""A decoder layer's children as the layer families that rewrite it see them (the residual norm's, the parallel
norm's): the ones with a role, and which two of them are norms."""

from __future__ import annotations


def roled_children(layer) -> dict:
    """{name: child} but its dropouts (Phi-3's around each add, GPT-NeoX's after the attention and the MLP): identity
    in eval, where a server runs the model, and so left out of a rewrite; a family's `identify` runs the layer with
    them in place, so a dropout that is not the identity when it is tried is no match."""
    import torch

    return {name: child for name, child in layer.named_children() if not isinstance(child, torch.nn.Dropout)}


def norm_children(layer) -> tuple[dict, dict] | None:
    """({name: norm variant} of its two norm children, {name: child} of its two others with parameters), or None."""
    from services.ops.recognise_norm import recognise

    children = roled_children(layer)
    if len(children) != 4:
        return None
    norms = {name: v for name, child in children.items() if (v := recognise(child))}
    others = {name: child for name, child in children.items() if name not in norms}
    if len(norms) != 2 or len(others) != 2 or not all(any(True for _ in c.parameters()) for c in others.values()):
        return None
    return norms, others
