"""A KV cache of fixed slots, one sequence per slot, each written at its own position.

Continuous batching steps sequences of different lengths together: row b of a step feeds one token at
`positions[b]`, writes its key/value there and attends to positions 0..positions[b] of its own slot
(the mask is built from the same positions, services.server.batch_decode). transformers' StaticCache
writes every row at one shared, implicit position (a counter it advances on each update, so replaying a
step twice advances it twice); here the position is an explicit tensor the decoder owns, so a step can be
run again, warmed up or captured in a CUDA graph without moving anything.

A prefill writes k prompts into k slots (`index.prefill`, right-padded to the longest): row i's keys
land at 0..L-1 of its slot and attention sees only the prompts themselves (what the padding writes past a
prompt's end is never read: a decode step writes a position before it attends to it). A decode step over
the first n slots writes row b at positions[b] and returns the first `length` positions of those slots (a
view: no copy) — attention reads as far as the longest sequence needs, not the whole slot.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, CacheLayerMixin


class SlotIndex:
    """What the next forward writes: one slot's prefill, or a step over the first n slots at `positions`."""

    def __init__(self, slots: int, device: torch.device):
        self.prefill: torch.Tensor | None = None  # the slots a prefill writes, one per prompt row
        self.positions = torch.zeros((slots, 1), dtype=torch.long, device=device)  # position fed per slot
        self.rows = torch.arange(slots, device=device)
        self.length = 0  # positions a decode step attends over (a Python int: fixed for a captured graph)


class SlotLayer(CacheLayerMixin):
    is_sliding = False
    is_compileable = False

    def __init__(self, slots: int, max_len: int, index: SlotIndex):
        super().__init__()
        self.slots, self.max_len, self.index = slots, max_len, index

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        heads, self.device = key_states.shape[1], key_states.device
        shape = (self.slots, heads, self.max_len)
        self.keys = torch.zeros((*shape, key_states.shape[-1]), dtype=key_states.dtype, device=self.device)
        self.values = torch.zeros((*shape, value_states.shape[-1]), dtype=value_states.dtype, device=self.device)
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        slots = self.index.prefill
        if slots is not None:  # prompts into their slots; attention over the prompts alone
            length = key_states.shape[-2]
            self.keys[slots, :, :length] = key_states
            self.values[slots, :, :length] = value_states
            return key_states, value_states
        n, length = key_states.shape[0], self.index.length
        rows, positions = self.index.rows[:n], self.index.positions[:n, 0]
        self.keys[rows, :, positions] = key_states[:, :, 0]
        self.values[rows, :, positions] = value_states[:, :, 0]
        return self.keys[:n, :, :length], self.values[:n, :, :length]

    def move(self, source: int, target: int) -> None:
        """Copy one slot's keys and values to another (compacting the batch into fewer rows)."""
        if self.is_initialized:
            self.keys[target].copy_(self.keys[source])
            self.values[target].copy_(self.values[source])

    # The mask is always given as a 4-D tensor (transformers returns it as-is), so these only answer
    # generic callers; they never size a mask.
    def get_mask_sizes(self, *args, **kwargs) -> tuple[int, int]:
        return self.max_len, 0

    def get_seq_length(self, *args, **kwargs) -> int:
        return 0

    def get_max_length(self) -> int:
        return self.max_len

    def get_max_cache_shape(self) -> int:
        return self.max_len


def slot_cache(config, slots: int, max_len: int, index: SlotIndex) -> Cache:
    layers = getattr(config, "num_hidden_layers", None)
    if not layers:
        raise ValueError("the model's config does not say how many layers it has (num_hidden_layers)")
    return Cache(layers=[SlotLayer(slots, max_len, index) for _ in range(layers)])


def slot_cache_problem(model: torch.nn.Module, max_len: int) -> str | None:
    """Why this model cannot decode over slots of `max_len` tokens (None when it can): only decoders whose mask
    is plain causal attention over their own tokens — full attention, or a sliding window no slot outgrows."""
    config = getattr(model, "config", None)
    if config is None or not getattr(config, "num_hidden_layers", None):
        return "the model has no config with num_hidden_layers"
    if getattr(config, "is_encoder_decoder", False):
        return "an encoder-decoder model"
    window = getattr(config, "sliding_window", None) if getattr(config, "use_sliding_window", True) else None
    if window and window >= max_len:
        window = None  # Mistral's 4096-token window never binds inside a 2048-token slot: plain causal
    kinds = set(getattr(config, "layer_types", None) or ["full_attention"])
    if window is None:
        kinds.discard("sliding_attention")
        kinds = kinds or {"full_attention"}
    if kinds != {"full_attention"}:
        return f"layers of kinds {sorted(kinds)}: only full attention decodes over slots"
    if window:
        return f"sliding-window attention ({window} tokens, inside a {max_len}-token slot)"
    return None
