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

A sliding-window or chunked layer keeps a ring of its window's width instead (position k at index k % ring):
a prefill writes each prompt's last `ring` positions (gathered per row from its own length, so the padding of
a shorter prompt never lands in its ring), a step writes at positions % ring and returns the ring, and the
mask (services.server.slot_masks) says which index holds what. Which layer gets which slot is
services.server.slot_plan's decision; conv and recurrent states live in services.server.slot_state.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from services.server.slot_plan import SlotPlan, slot_plan

try:
    from transformers.cache_utils import DummyLayer
except ImportError:  # transformers < 5.2x (the GPU machine's 5.17): no placeholder of its own

    class DummyLayer:
        """A layer that holds no cache (no attention, no state): what transformers' DummyLayer is where it has one."""

        is_compileable = is_croppable = True
        is_sliding = False

        def __init__(self, **kwargs):
            self.is_initialized, self.keys, self.values = True, None, None

        def update(self, key_states, value_states, *args, **kwargs):
            raise NotImplementedError("a layer without a cache is never updated")

        def offload(self): ...
        def prefetch(self): ...
        def reset(self): ...

        def get_seq_length(self, *args, **kwargs) -> int:
            return 0


class SlotIndex:
    """What the next forward writes: one slot's prefill, or a step over the first n slots at `positions`."""

    def __init__(self, slots: int, device: torch.device):
        self.prefill: torch.Tensor | None = None  # the slots a prefill writes, one per prompt row
        self.positions = torch.zeros((slots, 1), dtype=torch.long, device=device)  # position fed per slot
        self.rows = torch.arange(slots, device=device)
        self.length = 0  # positions a decode step attends over (a Python int: fixed for a captured graph)
        self.n = 0  # rows of the decode step running (a Python int: fixed for a captured graph)
        self.prefill_lasts: torch.Tensor | None = None  # each prompt's last position (a ring keeps what ends there)


class SlotLayer(CacheLayerMixin):
    is_sliding = False
    is_compileable = False

    def __init__(self, slots: int, max_len: int, index: SlotIndex, ring: int | None = None):
        CacheLayerMixin.__init__(self)
        self.slots, self.max_len, self.index = slots, max_len, index
        self.ring = ring or max_len  # positions kept: the slot, or a sliding window's / a chunk's ring
        self.is_sliding = self.ring < max_len

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        heads, self.device = key_states.shape[1], key_states.device
        shape = (self.slots, heads, self.ring)
        self.keys = torch.zeros((*shape, key_states.shape[-1]), dtype=key_states.dtype, device=self.device)
        self.values = torch.zeros((*shape, value_states.shape[-1]), dtype=value_states.dtype, device=self.device)
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        slots = self.index.prefill
        if slots is not None:  # prompts into their slots; attention over the prompts alone
            length = key_states.shape[-2]
            if self.is_sliding:
                self._prefill_ring(slots, key_states, value_states)
            else:
                self.keys[slots, :, :length] = key_states
                self.values[slots, :, :length] = value_states
            return key_states, value_states
        n, length = key_states.shape[0], min(self.index.length, self.ring)
        rows, positions = self.index.rows[:n], self.index.positions[:n, 0]
        if self.is_sliding:
            positions = positions % self.ring
        self.keys[rows, :, positions] = key_states[:, :, 0]
        self.values[rows, :, positions] = value_states[:, :, 0]
        return self.keys[:n, :, :length], self.values[:n, :, :length]

    def _prefill_ring(self, slots: torch.Tensor, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """Every ring index of each prompt's slot gets the latest of its prompt positions that lands there (index j:
        last - ((last - j) mod ring)); indices no position reached yet get position 0's, which the mask hides."""
        lasts = self.index.prefill_lasts[:, None]
        held = (lasts - (lasts - torch.arange(self.ring, device=lasts.device)) % self.ring).clamp(min=0)
        k, heads, _, width = key_states.shape
        take = held[:, None, :, None].expand(k, heads, self.ring, width)
        self.keys[slots] = key_states.gather(2, take)
        self.values[slots] = value_states.gather(2, take.expand(k, heads, self.ring, value_states.shape[-1]))

    def move(self, source: int, target: int) -> None:
        """Copy one slot's keys and values to another (compacting the batch into fewer rows)."""
        if self.is_initialized:
            self.keys[target].copy_(self.keys[source])
            self.values[target].copy_(self.values[source])

    # The mask is always given as a 4-D tensor (transformers returns it as-is), so these only answer
    # generic callers; they never size a mask.
    def get_mask_sizes(self, *args, **kwargs) -> tuple[int, int]:
        return self.ring, 0

    def get_seq_length(self, *args, **kwargs) -> int:
        return 0

    def get_max_length(self) -> int:
        return self.max_len

    def get_max_cache_shape(self) -> int:
        return self.max_len


def slot_cache(plan: SlotPlan, slots: int, max_len: int, index: SlotIndex) -> Cache:
    """A slot for every layer as the plan says: keys (over the slot or a ring), a state, both, or nothing."""
    from services.server.slot_state import SlotHybridLayer, SlotStateLayer

    layers = []
    for layer in plan.layers:
        ring = layer.keys.ring(max_len) if layer.keys is not None else None
        if layer.states and layer.keys is not None:
            layers.append(SlotHybridLayer(slots, max_len, index, ring, layer.states))
        elif layer.states:
            layers.append(SlotStateLayer(slots, index, layer.states))
        elif layer.keys is not None:
            layers.append(SlotLayer(slots, max_len, index, ring))
        else:
            layers.append(DummyLayer())
    return Cache(layers=layers)


def slot_cache_problem(model: torch.nn.Module, max_len: int) -> str | None:
    """Why this model cannot decode over slots of `max_len` tokens (None when it can): services.server.slot_plan
    names the layer kind no slot holds."""
    plan = slot_plan(getattr(model, "config", None), max_len)
    return plan if isinstance(plan, str) else None
