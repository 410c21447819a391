"""Conv and recurrent states of the slot lane: one state per slot for a Mamba, short-conv or linear-attention layer.

A state layer holds no keys: after a token its whole past is a conv state (the last kernel-width inputs of its
causal conv) and/or a recurrent state (Mamba's SSM state, a gated delta net's matrix). transformers' models reach
them through the Cache (`get_conv_state`, `update_conv_state`, `get_recurrent_state`, `update_recurrent_state`,
`has_previous_state`) and take their single-token path where a previous state exists. Here each state is a
[slots, ...] buffer:
- a prefill (`index.prefill` set) sees no previous state, runs its prompt path and leaves its final state in its
  prompt's slot, the whole of it: a conv state shorter than the kernel is zero-padded as transformers pads it, so
  nothing of the slot's earlier stream is left behind;
- a step over the first n slots sees the first n rows as views (fixed addresses: a CUDA graph replays them) that
  the model updates in place.
Prompts are never right-padded into a state (the padding would run through the recurrence): the decoder prefills
stateful models in groups of equal length (services.server.batch_decode). A step writes a throwaway token into
every row it runs; a busy slot not fed then (a canary beside running requests) keeps its state through `hold`.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import LinearAttentionCacheLayerMixin

from services.server.slot_cache import SlotIndex, SlotLayer


class SlotStateLayer(LinearAttentionCacheLayerMixin):
    is_compileable = False
    is_croppable = False
    supports_early_init = False

    def __init__(self, slots: int, index: SlotIndex, number_of_states: int = 1):
        # not the mixin's __init__: its per-state dicts are views here, derived from the index on each access
        self.slots, self.index, self.number_of_states = slots, index, number_of_states
        self._conv: dict[int, torch.Tensor | None] = dict.fromkeys(range(number_of_states))
        self._recurrent: dict[int, torch.Tensor | None] = dict.fromkeys(range(number_of_states))
        self.conv_kernel_size: dict[int, int | None] = dict.fromkeys(range(number_of_states))
        self.record_past = False
        self.device = self.dtype = None
        self.cumulative_length_linear = torch.tensor(0, dtype=torch.long)  # positions are explicit: never read

    # What transformers reads: during a prefill nothing, during a step the first n slots' states.
    @property
    def has_previous_state(self) -> dict[int, bool]:
        step = self.index.prefill is None
        return {i: step and (self._conv[i] is not None or self._recurrent[i] is not None) for i in self._conv}

    @property
    def conv_states(self) -> dict[int, torch.Tensor | None]:
        return {i: None if state is None else state[: self.index.n] for i, state in self._conv.items()}

    @property
    def recurrent_states(self) -> dict[int, torch.Tensor | None]:
        return {i: None if state is None else state[: self.index.n] for i, state in self._recurrent.items()}

    def lazy_initialization(self, conv_states=None, recurrent_states=None, state_idx: int = 0, conv_kernel_size=None):
        if conv_states is not None and self._conv[state_idx] is None:
            width = conv_kernel_size or conv_states.shape[-1]
            self.conv_kernel_size[state_idx] = width
            shape = (self.slots, *conv_states.shape[1:-1], width)
            self._conv[state_idx] = torch.zeros(shape, dtype=conv_states.dtype, device=conv_states.device)
            self.device, self.dtype = conv_states.device, conv_states.dtype
        if recurrent_states is not None and self._recurrent[state_idx] is None:
            shape = (self.slots, *recurrent_states.shape[1:])
            self._recurrent[state_idx] = torch.zeros(
                shape, dtype=recurrent_states.dtype, device=recurrent_states.device
            )
            self.device = recurrent_states.device

    def update_conv_state(self, conv_states: torch.Tensor, state_idx: int = 0, conv_kernel_size=None, **kwargs):
        self.lazy_initialization(conv_states=conv_states, state_idx=state_idx, conv_kernel_size=conv_kernel_size)
        width, buffer = self.conv_kernel_size[state_idx], self._conv[state_idx]
        slots = self.index.prefill
        if slots is not None:  # a prompt's inputs, zero-padded on the left to the kernel as transformers pads them
            full = conv_states
            if full.shape[-1] < width:
                full = torch.nn.functional.pad(full, (width - full.shape[-1], 0), value=0)
            buffer[slots] = full[..., -width:].to(buffer.dtype)
            return full
        rows = buffer[: conv_states.shape[0]]  # a step through the generic path: the state's inputs, then the new
        full = torch.cat([rows, conv_states], dim=-1)
        rows.copy_(full[..., -width:])
        return full

    def update_recurrent_state(self, recurrent_states, state_idx: int = 0, **kwargs):
        last = recurrent_states if isinstance(recurrent_states, torch.Tensor) else recurrent_states[-1]
        self.lazy_initialization(recurrent_states=last, state_idx=state_idx)
        buffer = self._recurrent[state_idx]
        slots = self.index.prefill
        if slots is not None:
            buffer[slots] = last.to(buffer.dtype)
            return last
        rows = buffer[: last.shape[0]]
        rows.copy_(last)
        return rows

    def increase_count(self, state_idx: int) -> None:
        pass  # positions are the decoder's (explicit), not a count kept here

    def get_seq_length(self) -> int:
        return 0

    def _buffers(self) -> list[torch.Tensor]:
        return [b for b in (*self._conv.values(), *self._recurrent.values()) if b is not None]

    def move(self, source: int, target: int) -> None:
        """Copy one slot's states to another (compacting the batch into fewer rows)."""
        for buffer in self._buffers():
            buffer[target].copy_(buffer[source])

    def hold(self, rows: list[int]) -> list[torch.Tensor]:
        """The states of `rows` now, for `restore` after a step that must not advance them."""
        return [buffer[rows].clone() for buffer in self._buffers()]

    def restore(self, rows: list[int], held: list[torch.Tensor]) -> None:
        for buffer, saved in zip(self._buffers(), held, strict=True):
            buffer[rows] = saved


class SlotHybridLayer(SlotStateLayer, SlotLayer):
    """A layer with keys beside its state (Falcon-H1's attention and Mamba side by side, Zamba2's shared block)."""

    def __init__(self, slots: int, max_len: int, index: SlotIndex, ring: int | None = None, states: int = 1):
        SlotLayer.__init__(self, slots, max_len, index, ring)
        SlotStateLayer.__init__(self, slots, index, states)

    def lazy_initialization(self, *args, **kwargs) -> None:
        if len(args) == 2 and not kwargs:  # keys and values, from `update`
            SlotLayer.lazy_initialization(self, *args)
        else:
            SlotStateLayer.lazy_initialization(self, *args, **kwargs)

    def get_seq_length(self) -> int:
        return 0

    def move(self, source: int, target: int) -> None:
        SlotLayer.move(self, source, target)
        SlotStateLayer.move(self, source, target)
