"""A decode step's grouped-head attention without a copy of the cache per query head (services.server.gqa_decode),
on the tiny live model (4 query heads, 2 key/value heads): the same answer as transformers' own path, and a batched
step that no longer writes a repeated key or value tensor."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers.integrations.sdpa_attention import repeat_kv
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from services.server import gqa_decode
from services.server.batch_decode import SlotDecoder
from services.server.engine import Engine
from services.server.models import load_model


@pytest.fixture(scope="module")
def engine():
    e = Engine(load_model("tiny-qwen2", "cpu"), slots=8, slot_tokens=64)
    yield e
    e.close()


def _attention_module(engine: Engine) -> torch.nn.Module:
    return next(m for m in engine.model.modules() if getattr(m, "num_key_value_groups", 1) > 1)


def test_loading_a_model_installs_it_once_and_the_name_stays_sdpa(engine):
    installed = ALL_ATTENTION_FUNCTIONS["sdpa"]
    assert getattr(installed, gqa_decode._WRAPPED, False)
    gqa_decode.install()
    assert ALL_ATTENTION_FUNCTIONS["sdpa"] is installed  # not wrapped twice
    assert engine.model.config._attn_implementation == "sdpa"
    gqa_decode.install(False)  # YANTRA_PACKED_GQA=0: transformers' own, then on again
    assert ALL_ATTENTION_FUNCTIONS["sdpa"] is installed.__wrapped__
    gqa_decode.install()
    assert getattr(ALL_ATTENTION_FUNCTIONS["sdpa"], gqa_decode._WRAPPED, False)


def test_a_decode_step_over_grouped_heads_answers_as_repeated_heads_do(engine):
    module = _attention_module(engine)
    groups = module.num_key_value_groups
    gen = torch.Generator().manual_seed(0)
    rows, kv_heads, span, dim = 5, 2, 48, 16
    query = torch.randn(rows, kv_heads * groups, 1, dim, generator=gen)
    key, value = (torch.randn(rows, kv_heads, span, dim, generator=gen) for _ in range(2))
    lengths = torch.tensor([1, 7, 20, 48, 33])  # each row attends to its own first positions, as slots do
    mask = torch.where(torch.arange(span) < lengths[:, None], 0.0, torch.finfo(torch.float32).min)
    mask = mask.view(rows, 1, 1, span)
    scale = dim**-0.5

    got, _ = ALL_ATTENTION_FUNCTIONS["sdpa"](module, query, key, value, mask, scaling=scale)
    reference = torch.nn.functional.scaled_dot_product_attention(
        query, repeat_kv(key, groups), repeat_kv(value, groups), attn_mask=mask, scale=scale
    ).transpose(1, 2)
    assert got.shape == (rows, 1, kv_heads * groups, dim)
    torch.testing.assert_close(got, reference, atol=1e-6, rtol=1e-5)
    assert gqa_decode.packs(module, query, key, mask, {})
    # what reshaping does not serve exactly goes to transformers' own function
    assert not gqa_decode.packs(module, query.expand(rows, -1, 2, dim), key, mask, {})  # a prompt's tokens
    assert not gqa_decode.packs(module, query, key, mask.expand(rows, 4, 1, span), {})  # a mask per head
    assert not gqa_decode.packs(module, query, key, mask, {"position_bias": mask})
    assert not gqa_decode.packs(module, query, key, None, {})
    assert not gqa_decode.packs(module, query, key[:, :1], mask, {})  # key heads the groups do not account for


class _Shapes(TorchDispatchMode):
    """Every shape an op of the step returns."""

    def __init__(self):
        super().__init__()
        self.shapes: list[tuple[int, ...]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor):
            self.shapes.append(tuple(out.shape))
        return out


def _repeated_caches(engine: Engine, attention) -> int:
    """Tensors shaped as the cache repeated per query head (rows, heads, span, dim) that one batched step makes."""
    config = engine.model.config
    heads, dim = config.num_attention_heads, config.hidden_size // config.num_attention_heads
    decoder = SlotDecoder(engine.model, "cpu", engine.loaded.dtype, 4, 64, engine._cache_kw)
    for slot in range(4):
        decoder.prefill(slot, engine.encode("grouped heads"))
    saved = ALL_ATTENTION_FUNCTIONS["sdpa"]
    ALL_ATTENTION_FUNCTIONS.register("sdpa", attention)
    try:
        with _Shapes() as seen:
            decoder.step(dict.fromkeys(range(4), 5))
    finally:
        ALL_ATTENTION_FUNCTIONS.register("sdpa", saved)
    return sum(1 for s in seen.shapes if len(s) == 4 and s[:2] == (4, heads) and s[3] == dim and s[2] > 1)


def _repeating(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """What transformers before 5.25 (the GPU machine's 5.17) does with a mask: every key/value head repeated."""
    groups = module.num_key_value_groups
    out = torch.nn.functional.scaled_dot_product_attention(
        query, repeat_kv(key, groups), repeat_kv(value, groups), attn_mask=attention_mask, scale=scaling
    )
    return out.transpose(1, 2).contiguous(), None


def test_a_batched_step_no_longer_writes_the_cache_once_per_query_head(engine):
    layers = engine.model.config.num_hidden_layers
    assert _repeated_caches(engine, _repeating) == 2 * layers  # a key and a value copy per layer, every step
    assert _repeated_caches(engine, gqa_decode.wrap(_repeating)) == 0
    assert _repeated_caches(engine, ALL_ATTENTION_FUNCTIONS["sdpa"]) == 0  # as installed, whatever this one's is
