"""A decode step's attention over grouped key/value heads without copying them per query head.

With a mask, transformers' SDPA attention (before 5.25) cannot use SDPA's own GQA (`enable_gqa` falls back to the
math kernel on CUDA), so it repeats every key and value head for each query head of its group (`repeat_kv`): a new
tensor of the cache's size times the group, every layer, every step. A batched decode step always carries a mask
(each slot its own length), so on Qwen2.5-1.5B's shape (12 query heads, 2 key/value heads) a step of 64 slots over
512 positions writes ~200 MB per layer and reads it back: ~12 GB a step, several ms on an H200, growing with rows
and depth, which batch-1 steps do not pay. With one query token the copy is unneeded: the query heads of one key
head become that head's query rows, `(rows, heads, 1, dim) -> (rows, kv_heads, group, dim)`, and a mask shared by
all heads broadcasts over them. transformers 5.25 does just this (`pack_gqa`); the server's GPU pairing
(TOOLCHAIN.md) predates it, so the server installs the same reshaping in front of whichever SDPA attention its
transformers has. Everything else (prompts, a mask per head, position biases, no groups) goes to it unchanged.
"""

from __future__ import annotations

import torch

_WRAPPED = "_yantra_gqa_decode"  # set on our function: installing twice wraps once


def packs(
    module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, attention_mask: torch.Tensor | None, kwargs: dict
) -> bool:
    """Whether this call is a decode step over grouped heads that reshaping serves exactly: one query token, more
    than one query head per key/value head (and as many as the key's heads say), a float mask shared by every head,
    nothing else added to the scores."""
    groups = getattr(module, "num_key_value_groups", 1)
    return (
        isinstance(groups, int)
        and groups > 1
        and query.shape[2] == 1
        and query.shape[1] == key.shape[1] * groups
        and attention_mask is not None
        and attention_mask.dim() == 4
        and attention_mask.shape[1] == 1
        and attention_mask.dtype.is_floating_point
        and kwargs.get("position_bias") is None
        and kwargs.get("softcap") is None
        and kwargs.get("s_aux") is None
        and not kwargs.get("output_attentions", False)
    )


def decode_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor,
    dropout: float = 0.0,
    scaling: float | None = None,
) -> torch.Tensor:
    """SDPA of one query token per row with each key/value head's query heads as its rows; (rows, 1, heads, dim)
    as transformers' attention functions return it. Query head h reads key head h // group, as `repeat_kv` pairs
    them."""
    rows, heads, _, dim = query.shape
    packed = query.reshape(rows, heads // module.num_key_value_groups, module.num_key_value_groups, dim)
    out = torch.nn.functional.scaled_dot_product_attention(
        packed, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling
    )
    return out.reshape(rows, heads, 1, value.shape[-1]).transpose(1, 2).contiguous()


def wrap(sdpa):
    """transformers' SDPA attention function `sdpa`, with decode steps over grouped heads reshaped (`packs`)."""
    if getattr(sdpa, _WRAPPED, False):
        return sdpa

    def attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
        if packs(module, query, key, attention_mask, kwargs):
            return decode_attention(module, query, key, value, attention_mask, dropout, scaling), None
        return sdpa(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)

    setattr(attention, _WRAPPED, True)
    attention.__wrapped__ = sdpa
    return attention


def install(on: bool = True) -> None:
    """Put `wrap(sdpa)` where every model of this process looks SDPA attention up (transformers' attention
    interface, process-wide: "sdpa" stays the name every model and mask builder knows), or with `on` False put
    transformers' own back (YANTRA_PACKED_GQA=0; a benchmark's side-by-side lane). Idempotent. A CUDA graph holds
    the attention it was captured with: an engine's graphs follow the setting of when they were captured."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    current = ALL_ATTENTION_FUNCTIONS["sdpa"]
    if on:
        ALL_ATTENTION_FUNCTIONS.register("sdpa", wrap(current))
    elif getattr(current, _WRAPPED, False):
        ALL_ATTENTION_FUNCTIONS.register("sdpa", current.__wrapped__)
