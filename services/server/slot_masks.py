"""The additive attention masks of the slot lane, one per visibility rule (services.server.slot_plan): pure
tensor functions of the positions, so a captured CUDA graph recomputes them from the positions it is fed.

A step's row at position p reads `width` key positions of its slot. Full attention keeps position k at index k;
a sliding window or a chunk keeps a ring of R = `Visibility.ring(max_len)` positions, position k at index k % R.
One formula covers both: index j holds the latest position written there, p - ((p - j) mod R), which is p's own
index for j = p mod R (the step writes before it attends) and negative where nothing of this sequence was written
yet (a slot's earlier stream left it: masked). The row sees it when it falls inside its rule's reach.
"""

from __future__ import annotations

import torch

from services.server.slot_plan import CHUNKED, SLIDING, Visibility


def _lowest(rule: Visibility, position: torch.Tensor) -> torch.Tensor:
    """The first position a query at `position` sees under `rule` (0 for full attention)."""
    if rule.kind == SLIDING:
        return (position - rule.size + 1).clamp(min=0)
    if rule.kind == CHUNKED:
        return position - position % rule.size
    return torch.zeros_like(position)


def step_mask(
    rule: Visibility, positions: torch.Tensor, width: int, ring: int, dtype: torch.dtype, masked: float
) -> torch.Tensor:
    """[n, 1, 1, width]: 0 where row b (at positions[b], shape [n, 1]) sees the key at index j, `masked` elsewhere."""
    index = torch.arange(width, device=positions.device)
    held = positions - (positions - index) % ring  # the position index j holds, for each row
    seen = (held >= _lowest(rule, positions)) & (held <= positions)
    return torch.where(seen, 0.0, masked).to(dtype)[:, None, None, :]


def prefill_mask(rule: Visibility, length: int, rows: int, device, dtype: torch.dtype, masked: float) -> torch.Tensor:
    """[rows, 1, length, length]: a prompt's causal mask under `rule` (each prompt starts at position 0)."""
    query = torch.arange(length, device=device)[:, None]
    key = torch.arange(length, device=device)[None, :]
    seen = (key <= query) & (key >= _lowest(rule, query))
    return torch.where(seen, 0.0, masked).to(dtype).expand(rows, 1, -1, -1)
