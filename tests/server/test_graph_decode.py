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


async def test_the_engines_graph_lane_serves_leases_falls_back_and_follows_swaps():
    import asyncio

    from server_fixtures import HERE, load_candidate, rmsnorm_contract

    from services.server.engine import GRAPH_POOL, Engine
    from services.server.hotswap import apply_swap, forwards_version
    from services.server.models import load_model

    engine = Engine(load_model("tiny-qwen2", "cpu"), graphs=True)  # on a CPU: the static-cache lane, eager steps
    try:
        ids = engine.encode("Hello there")
        expected = engine.decode(ids, 6)[0]

        async def one():
            return [t for chunk in [c async for c in engine.generate(ids, 6, stop_at_eos=False)] for t in chunk]

        results = await asyncio.gather(*(one() for _ in range(GRAPH_POOL + 2)))  # more than the pool: eager too
        assert all(r == expected for r in results)
        assert len(engine._decoders[512]) == GRAPH_POOL and not engine._leased  # every lease returned
        measured = await engine.measure_decode(["Hello there"], 6)
        assert measured.tokens == 6 and not engine._leased

        version = forwards_version()
        handle = await engine.exclusive(
            apply_swap, engine.model, rmsnorm_contract(), load_candidate(HERE / "rmsnorm_kernel.py")
        )
        assert forwards_version() == version + 1  # a graph captured before would be captured again
        assert await one() == expected  # the kernel serves in the lane
        await engine.exclusive(handle.revert)
        assert forwards_version() == version + 2
    finally:
        engine.close()
