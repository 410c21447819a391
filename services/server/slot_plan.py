"""Which slot each layer of a model gets: a pure decision over its config, made once at load.

A model's layers are of kinds transformers names in `config.layer_types` (or infers from `sliding_window` /
`attention_chunk_size`, `cache_utils.get_layer_types_and_kwargs`): attention over all earlier positions, over a
sliding window, over a chunk; a conv or linear-attention (Mamba, gated delta net) layer that carries state
instead of keys; a hybrid layer with both (Falcon-H1). Each kind gets a slot of its own: keys over the whole slot,
keys in a ring as wide as the window or chunk, or one state per slot. A window no slot outgrows is plain causal
attention. Anything else is refused by name: the solo lane serves it, and the refusal says why.
"""

from __future__ import annotations

from dataclasses import dataclass

FULL, SLIDING, CHUNKED = "full_attention", "sliding_attention", "chunked_attention"
STATE_KINDS = ("conv", "linear_attention")  # no keys: a conv state and/or a recurrent state per slot
HYBRID_KINDS = {"hybrid": FULL, "hybrid_sliding": SLIDING}  # a state beside keys of this attention kind
NO_CACHE = "dummy"  # a layer without attention (an MLP or MoE block in layer_types): nothing to hold


@dataclass(frozen=True)
class Visibility:
    """Which earlier positions a query at position p sees: all (FULL), the last `size` ones itself included
    (SLIDING: key > p - size), or those of its own chunk of `size` (CHUNKED: key // size == p // size)."""

    kind: str = FULL
    size: int = 0

    def ring(self, max_len: int) -> int:
        """Positions a slot keeps for this rule: the window or chunk, never more than the slot."""
        return max_len if self.kind == FULL else min(self.size, max_len)


@dataclass(frozen=True)
class LayerSlot:
    states: int  # conv/recurrent states per slot (0: none)
    keys: Visibility | None  # keys and values per slot, seen by this rule; None: no attention here


@dataclass(frozen=True)
class SlotPlan:
    layers: tuple[LayerSlot, ...]
    masks: dict[str, Visibility]  # each attention kind its layers have, and what it sees

    @property
    def stateful(self) -> bool:
        return any(layer.states for layer in self.layers)

    @property
    def mask_dict(self) -> bool:
        """Whether the forward takes a mask per layer kind (a dict) rather than one mask for every layer: stateful
        models look theirs up by kind, and so must a model whose attention layers see differently."""
        return self.stateful or len(set(self.masks.values())) > 1

    @property
    def mask_rules(self) -> dict[str, Visibility]:
        """The masks a forward is given, by attention kind: with a dict, the full one always (hybrid models look it
        up by name even where no layer is plain full attention)."""
        return {FULL: Visibility(), **self.masks} if self.mask_dict else self.masks


def _visibility(kind: str, size: int | None, max_len: int) -> Visibility:
    if kind == FULL or not size or size >= max_len:
        return Visibility()  # a window or chunk no slot outgrows (Mistral's 4096 in a 2048-token slot): all of it
    return Visibility(kind, int(size))


def slot_plan(config, max_len: int) -> SlotPlan | str:
    """Each layer's slot for slots of `max_len` tokens, or why the model cannot have one (a sentence)."""
    if config is None or not getattr(config, "num_hidden_layers", None):
        return "the model has no config with num_hidden_layers"
    if getattr(config, "is_encoder_decoder", False):
        return "an encoder-decoder model"
    from transformers.cache_utils import get_layer_types_and_kwargs

    text = config.get_text_config(decoder=True)
    if "reuse" in (getattr(text, "kv_sharing_modes", None) or ()):
        return "layers that read another layer's keys and values (KV sharing) have no slot cache yet"
    try:
        kinds, kwargs = get_layer_types_and_kwargs(text)
    except (AttributeError, TypeError, ValueError) as exc:
        return f"its layer kinds could not be read from its config ({type(exc).__name__}: {exc})"
    if isinstance(kwargs, dict):  # transformers before 5.2x (5.17) gives one dict for every layer, not one each
        kwargs = [kwargs] * len(kinds)
    if len(kinds) != text.num_hidden_layers:
        return f"its config names {len(kinds)} layer kinds for {text.num_hidden_layers} layers"
    layers, masks = [], {}
    for kind, extra in zip(kinds, kwargs, strict=True):
        attention = HYBRID_KINDS.get(kind, kind)
        states = int(extra.get("number_of_states", 1)) if kind in STATE_KINDS or kind in HYBRID_KINDS else 0
        if kind == NO_CACHE:
            layers.append(LayerSlot(states=0, keys=None))
        elif kind in STATE_KINDS:
            layers.append(LayerSlot(states=states, keys=None))
        elif attention in (FULL, SLIDING, CHUNKED):
            rule = _visibility(attention, extra.get("sliding_window"), max_len)
            if masks.setdefault(attention, rule) != rule:
                return f"{attention} layers of different sizes ({masks[attention].size}, {rule.size}): one mask a kind"
            layers.append(LayerSlot(states=states, keys=rule))
        else:
            known = sorted({FULL, SLIDING, CHUNKED, NO_CACHE, *STATE_KINDS, *HYBRID_KINDS})
            return f"layers of kind {kind!r} have no slot cache (slots hold {', '.join(known)})"
    return SlotPlan(tuple(layers), masks)
