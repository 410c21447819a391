"""Decode over a static cache (the CUDA-graph path; eager steps on CPU) against the engine's own decode."""

from __future__ import annotations

import pytest
import torch

from services.server.graph_decode import GraphDecoder


def _logits(decoder: GraphDecoder, ids: list[int], forced: list[int]) -> list[torch.Tensor]:
    decoder.prefill(ids)
    out = [decoder.last_logits.float().clone()]
    for i, token in enumerate(forced[:-1]):
        decoder.step(token, len(ids) + i)
        out.append(decoder.last_logits.float().clone())
    return out


@pytest.mark.parametrize("prompt", ["Hello there, this is the static cache", "A"])
def test_static_cache_decode_gives_the_engines_logits_step_by_step(engine, prompt):
    ids = engine.encode(prompt)
    tokens, reference = engine.decode(ids, 8, keep_logits=True)
    decoder = GraphDecoder(engine.model, engine.loaded.device, engine.loaded.dtype, 64, engine._cache_kw)
    got = _logits(decoder, ids, tokens)
    assert len(got) == len(reference) == 8
    for step, (a, b) in enumerate(zip(got, reference, strict=True)):
        assert torch.allclose(a, b, atol=1e-4, rtol=1e-4), (step, float((a - b).abs().max()))
    assert decoder.decode(ids, 8) == tokens
    assert decoder.decode(engine.encode("Another one"), 3) == engine.decode(engine.encode("Another one"), 3)[0]


def test_a_prompt_past_the_static_cache_is_refused(engine):
    decoder = GraphDecoder(engine.model, engine.loaded.device, engine.loaded.dtype, 8, engine._cache_kw)
    with pytest.raises(ValueError, match="do not fit the 8-token static cache"):
        decoder.prefill(list(range(1, 9)))
