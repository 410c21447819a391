"""A decoder layer's children as the layer families that rewrite it see them (the residual norm's, the parallel
norm's): the ones with a role, which two of them are norms, and the layer's own forward run with some of them stood
in for (how each family finds what the layer computes)."""

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


def required_rest(forward) -> dict:
    """None for each required parameter of a layer's forward after its input (Qwen3-Next's requires its
    position_embeddings): they go to the stood-in attention, which takes anything; a layer using one itself raises
    and is not the family's op."""
    import inspect

    try:
        params = list(inspect.signature(forward).parameters.values())[2:]  # past self and the input
    except (TypeError, ValueError):
        return {}
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {p.name: None for p in params if p.kind in kinds and p.default is p.empty}


def run_stood_in(layer, standins: dict, hooks: dict, probe) -> tuple[bool, object]:
    """The layer's own class's forward on `probe`, each child named in `standins` replaced by its stand-in and each
    named in `hooks` given that forward hook, all restored before returning: (True, its output), or (False, None)
    when it raises (the stand-ins in the wrong roles, or a layer that wants more: not this assignment)."""
    import torch

    saved = {name: layer._modules[name] for name in standins}
    handles = [layer._modules[name].register_forward_hook(hook) for name, hook in hooks.items()]
    layer._modules.update(standins)
    try:
        with torch.inference_mode():  # the class's own forward: a layer serving a kernel is still what it was
            return True, type(layer).forward(layer, probe, **required_rest(type(layer).forward))
    except Exception:
        return False, None
    finally:
        layer._modules.update(saved)
        for h in handles:
            h.remove()


def same(a, b) -> bool:
    """Two tensors of one shape, equal bit for bit (what recognition asks of what a layer fed and returned)."""
    import torch

    return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape and torch.equal(a, b)
