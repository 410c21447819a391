"""The gated-MLP op family (SwiGLU, GeGLU): recognised today; its kernel, plan and wrapper come next.

A gated MLP computes down(act(gate(x)) · up(x)) with three linear maps: Llama, Qwen2/3, Mistral and Cohere
with SiLU, Gemma with tanh-approximated GELU. The family will fuse act(gate) · up into one pass over the
intermediate activations, as a rewrite of the MLP's forward that keeps its projections. What it does now is
the first step of every family: say what a live module computes by running it, so the profile names a
model's MLP for what it is (`ModuleClassProfile.computes`) whatever its class or attribute names — and
nothing is written for it yet (`WRITABLE` is empty).

Which two maps are the gate and the up projection, and which the down, is read from their shapes (gate and
up take the hidden width to the intermediate one, down takes it back); which of the first two is the gate,
and which activation, from running the module's own forward on probe rows beside each candidate formula.
"""

from __future__ import annotations

FAMILY = "gated_mlp"
VARIANTS = ("swiglu", "geglu_tanh", "geglu")
WRITABLE: tuple[str, ...] = ()
PROBE_ROWS = 4


def _activations():
    import torch.nn.functional as F

    return {
        "swiglu": F.silu,
        "geglu_tanh": lambda t: F.gelu(t, approximate="tanh"),
        "geglu": F.gelu,
    }


def _linear_maps(module) -> dict | None:
    """The module's three children that are linear maps ({name: child}), or None when it has not three."""
    import torch

    maps = {}
    for name, child in module.named_children():
        weight = getattr(child, "weight", None)
        if isinstance(weight, torch.Tensor) and weight.dim() == 2:
            if any(True for _ in child.children()):
                return None
            maps[name] = child
    return maps if len(maps) == 3 else None


def roles(module) -> tuple[str, str, str] | None:
    """(one of gate/up, the other, down) by shape: two maps of one shape, and a third of the transposed shape."""
    maps = _linear_maps(module)
    if maps is None:
        return None
    shapes = {name: tuple(child.weight.shape) for name, child in maps.items()}
    for down, shape in shapes.items():
        pair = [n for n in shapes if n != down]
        if shapes[pair[0]] == shapes[pair[1]] == shape[::-1] and shape[0] != shape[1]:
            return pair[0], pair[1], down
    return None


def recognise(module) -> str | None:
    """The variant `module` computes (see VARIANTS), or None. Runs its forward once on probe rows."""
    import torch

    found = roles(module)
    if found is None:
        return None
    first, second, down = found
    maps = dict(module.named_children())
    hidden = int(maps[down].weight.shape[0])
    weight = maps[down].weight
    gen = torch.Generator().manual_seed(hidden)
    probe = torch.randn(PROBE_ROWS, hidden, generator=gen).to(weight.device, weight.dtype)
    with torch.inference_mode():
        try:
            got = module(probe)
        except Exception:  # a forward that wants more than the hidden states is not an MLP of this shape
            return None
        if not isinstance(got, torch.Tensor) or got.shape != probe.shape:
            return None
        got = got.float()
        scale = max(1e-6, float(got.abs().max()))
        errors = {}
        for gate, up in ((first, second), (second, first)):
            g, u = maps[gate](probe).float(), maps[up](probe).float()
            for variant, act in _activations().items():
                expected = maps[down]((act(g) * u).to(weight.dtype)).float()
                errors[variant, gate] = float((got - expected).abs().max()) / scale
    from services.ops.recognise_norm import TOLERANCE

    (variant, _), error = min(errors.items(), key=lambda kv: kv[1])
    return variant if error <= TOLERANCE.get(weight.dtype, 1e-3) else None
