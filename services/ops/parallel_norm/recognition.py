"""What a parallel-residual layer computes, found by running it with its attention and MLP stood in for.

A layer is this family's when, on a probe `x`, both of its norm children are fed `x` itself, its attention is fed
one norm's output and its MLP the other's, and it returns `mlp's output + attention's output + x`, bit for bit
(GPT-NeoX / Pythia with `use_parallel_residual`). Never from class or attribute names. A sequential layer (its post
norm fed `x + attention`) is the residual norm's; a parallel block with one norm (Cohere, GPT-J) has no second norm
to fuse; a layer whose norms read different inputs computes something else. None of them is recognised here.

Both norms must compute the same variant at one width with one epsilon: the fused op normalises each row once and
applies the two norms' weights (and biases) to that one normalised row.
"""

from __future__ import annotations

import itertools

from services.ops.layer_children import norm_children, run_stood_in, same

PROBE_SHAPE = (1, 3)  # batch, positions of the recognition probe
# Each norm's output is tagged by adding its own constant (through a forward hook), so the two outputs differ even
# when the norms hold equal weights (a model at init): which one the attention was fed is then a fact of the data.
TAGS = (0.5, 1.5)


def _standins(attention_pair: bool):
    """A recording attention (answering (output, None) as HF attentions do, or a tensor) and a recording MLP, each an
    affine map of its input so what each was fed shows in what the layer returns."""
    import torch

    class Recorder(torch.nn.Module):
        def __init__(self, scale: float, shift: float, pair: bool):
            super().__init__()
            self.scale, self.shift, self.pair = scale, shift, pair
            self.calls: list = []

        def forward(self, *args, **kwargs):
            h = args[0] if args else kwargs.get("hidden_states")
            out = h * self.scale + self.shift
            self.calls.append((h, out, len(args), kwargs))
            return (out, None) if self.pair else out

    return Recorder(0.5, 0.25, attention_pair), Recorder(-0.75, 0.125, False)


def _traced(layer, attention: str, mlp: str, norms, probe, attention_pair: bool) -> dict | None:
    """The layer's own forward on `probe`, its `attention` and `mlp` stood in for and each norm's output tagged:
    what each part was fed and gave, or None when it does not run so."""
    att, mlp_standin = _standins(attention_pair)
    seen: dict[str, list] = {}
    hooks = {}
    for tag, name in zip(TAGS, sorted(norms), strict=True):

        def hook(module, args, output, name=name, tag=tag):
            tagged = output + tag
            seen.setdefault(name, []).append((args[0] if args else None, tagged))
            return tagged

        hooks[name] = hook
    ran, out = run_stood_in(layer, {attention: att, mlp: mlp_standin}, hooks, probe)
    if not ran:
        return None
    if len(att.calls) != 1 or len(mlp_standin.calls) != 1 or sorted(seen) != sorted(norms):
        return None
    if any(len(calls) != 1 for calls in seen.values()):
        return None
    (_, _, att_positional, _), (_, _, mlp_positional, mlp_kwargs) = att.calls[0], mlp_standin.calls[0]
    # the rewrite calls the attention with the normed input alone by position (the layer's keywords after it) and
    # the MLP with its normed input alone: a layer calling them otherwise is not rewritten so
    if att_positional != 1 or mlp_positional != 1 or mlp_kwargs:
        return None
    return {
        "norms": {name: calls[0] for name, calls in seen.items()},
        "attention": att.calls[0][:2],
        "mlp": mlp_standin.calls[0][:2],
        "out": out,
    }


def _one_norm(layer, norms: dict) -> bool:
    """Whether the two norms are one norm twice over but their weights: one variant, one width, one epsilon."""
    from services.ops.recognise_norm import epsilon_of

    children = [getattr(layer, name) for name in norms]
    shapes = {tuple(child.weight.shape) for child in children}
    epsilons = {epsilon_of(child) for child in children}
    return len(set(norms.values())) == 1 and len(shapes) == 1 and len(epsilons) == 1 and None not in epsilons


def identify(layer) -> tuple[str, dict[str, str]] | None:
    """(the norms' variant, {role: child name}) of a parallel-residual layer; None when `layer` is not one. Runs its
    forward four times at most on a probe, its attention and MLP stood in for (restored before returning)."""
    import torch

    found = norm_children(layer)
    if found is None:
        return None
    norms, others = found
    if not _one_norm(layer, norms):
        return None
    weight = getattr(layer, next(iter(norms))).weight
    gen = torch.Generator().manual_seed(int(weight.shape[0]))
    probe = torch.randn(*PROBE_SHAPE, int(weight.shape[0]), generator=gen).to(weight.device, weight.dtype)
    for (attention, mlp), pair in itertools.product(itertools.permutations(others), (True, False)):
        trace = _traced(layer, attention, mlp, norms, probe, pair)
        if trace is None:
            continue
        (a_in, a_out), (m_in, m_out) = trace["attention"], trace["mlp"]
        fed = trace["norms"]
        if not all(same(given, probe) for given, _ in fed.values()):
            continue  # a norm fed anything but the layer's input: not two norms of one hidden state
        pre = next((n for n, (_, o) in fed.items() if same(a_in, o)), None)
        post = next((n for n, (_, o) in fed.items() if n != pre and same(m_in, o)), None)
        if pre is None or post is None:
            continue
        if same(trace["out"], m_out + a_out + probe):  # GPT-NeoX's order of adds: the rewrite keeps it
            roles = {"input_norm": pre, "attention": attention, "post_norm": post, "mlp": mlp}
            return norms[pre], roles
    return None
