"""Continuous batching over the slot cache (services.server.batch_decode, .batching) on the tiny live model.

On a CPU the batched lane steps eagerly; the same SlotDecoder captures each step as a CUDA graph on a GPU
(tests/server/test_gpu.py). Every check compares against the engine's own eager decode, one request alone.
"""

from __future__ import annotations

import asyncio
import math
import time

import pytest
import torch
from server_fixtures import HERE, load_candidate, rmsnorm_contract

from services.server.batch_decode import PREFILL, Graph, SlotDecoder, runnable
from services.server.engine import CAPTURE_UNDER_LOAD_S, Engine, capture_due
from services.server.hotswap import is_patched
from services.server.models import load_model
from services.server.sampling import Sampling

PROMPTS = ["Hello there, this is the slot cache", "A", "Another one bites the dust", "x y z", "Continuous"]


@pytest.fixture(scope="module")
def small():
    """tiny-qwen2 with 4 slots of 64 tokens, so requests queue for slots and long ones decode alone."""
    e = Engine(load_model("tiny-qwen2", "cpu"), slots=4, slot_tokens=64)
    yield e
    e.close()


def _solo(engine: Engine, prompt: str, n: int) -> list[int]:
    return engine.decode(engine.encode(prompt), n)[0]


async def _tokens(engine: Engine, prompt: str, n: int, **kw) -> list[int]:
    return [t async for chunk in engine.generate(engine.encode(prompt), n, stop_at_eos=False, **kw) for t in chunk]


def test_sequences_joining_at_different_steps_get_their_own_logits_step_by_step(engine):
    decoder = SlotDecoder(engine.model, "cpu", engine.loaded.dtype, 8, 64, engine._cache_kw)
    refs = [engine.decode(engine.encode(p), 8, keep_logits=True) for p in PROMPTS[:3]]
    slots, got = {}, {i: [] for i in range(3)}
    for step in range(12):
        if step < 3:  # one joins per step while the others decode
            slots[step] = decoder.free_slot()
            got[step].append(decoder.prefill(slots[step], engine.encode(PROMPTS[step])).float().clone())
        feeds = {slots[i]: refs[i][0][len(got[i]) - 1] for i in slots if len(got[i]) < 8}  # teacher-forced
        if not feeds:
            break
        logits = decoder.step(feeds)
        for i in slots:
            if slots[i] in feeds:
                got[i].append(logits[slots[i]].float().clone())
    for i, (_, reference) in enumerate(refs):
        assert len(got[i]) == 8
        for step, (a, b) in enumerate(zip(got[i], reference, strict=True)):
            # fp32, another summation order (padded rows, several at once): within ~1e-5 of the logits' scale
            scale = float(b.abs().max())
            assert torch.allclose(a, b, atol=1e-5 * scale, rtol=1e-5), (i, step, float((a - b).abs().max()), scale)


def test_compaction_moves_a_sequence_into_a_lower_slot_without_changing_it(engine):
    decoder = SlotDecoder(engine.model, "cpu", engine.loaded.dtype, 8, 64, engine._cache_kw)
    ids = engine.encode(PROMPTS[0])
    expected = engine.decode(ids, 6)[0]
    for slot in range(3):
        decoder.prefill(slot, engine.encode(PROMPTS[slot + 1]))
    decoder.prefill(3, ids)  # slot 3: a step runs 4 rows
    got = [expected[0], int(decoder.step({3: expected[0]})[3].argmax())]
    for slot in range(3):
        decoder.release(slot)
    assert decoder.bucket() == 4
    assert decoder.compact() == {3: 0} and decoder.bucket() == 1  # its keys and values copied to slot 0
    for _ in range(4):
        got.append(int(decoder.step({0: got[-1]})[0].argmax()))
    assert got == expected


def test_the_graphs_captured_at_load_are_every_bucket_at_every_span_a_step_can_run(engine):
    """A GPU captures each of these at load (SlotDecoder.capture_all): a step never meets a key outside them."""
    cases = (
        (8, 512, [1, 2, 4, 8], [128, 256, 512]),
        (10, 300, [1, 2, 4, 8, 10], [128, 256, 300]),
        (3, 64, [1, 2, 3], [64]),
    )
    for slots, length, rows, spans in cases:
        decoder = SlotDecoder(engine.model, "cpu", engine.loaded.dtype, slots, length, engine._cache_kw)
        assert [k for k in decoder.keys() if k[0] != PREFILL] == [(n, span) for n in rows for span in spans]
        joins = [k for k in decoder.keys() if k[0] == PREFILL]
        lengths = [n for n in (16, 32, 64, 128, 256) if n < length]
        assert joins == [(PREFILL, k, n) for k in range(1, min(4, slots) + 1) for n in lengths]
        for highest in range(slots):  # every step's key is among them, whatever slots are busy and however deep
            for need in (1, length // 2, length):
                assert (decoder._bucket_for(highest), decoder.span_for(need)) in decoder.keys()
        assert decoder.capture_all()[0] == 0 and decoder.eager_steps == 0  # a CPU steps eagerly: no graph


def test_a_prompt_longer_than_a_slot_is_refused_by_the_decoder(engine):
    decoder = SlotDecoder(engine.model, "cpu", engine.loaded.dtype, 2, 8, engine._cache_kw)
    with pytest.raises(ValueError, match="do not fit the 8-token slot cache"):
        decoder.prefill(0, list(range(1, 9)))


async def test_more_requests_than_slots_are_batched_queued_and_each_gets_its_own_tokens(small):
    lengths = [3, 9, 6, 12, 5, 7, 4, 10]  # 8 requests for 4 slots: some wait, all leave at different steps
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(len(lengths))]
    expected = [_solo(small, p, n) for p, n in zip(prompts, lengths, strict=True)]
    widest = []

    tick = small.batcher.tick

    def watched():
        out = tick()
        widest.append(small.batcher.stepped)
        return out

    small.batcher.tick = watched
    try:
        got = await asyncio.gather(*(_tokens(small, p, n) for p, n in zip(prompts, lengths, strict=True)))
    finally:
        del small.batcher.tick
    assert got == expected
    assert max(widest) == 4  # four requests in one step: batched, not one after another
    assert not any(small.decoder.busy) and small.batcher.idle() and small.active == 0


async def test_a_request_longer_than_a_slot_decodes_alone_beside_the_batch(small):
    long_prompt = " ".join(["word"] * 40)  # 40+ tokens + 30 new > 64 per slot
    ids = small.encode(long_prompt)
    assert not small.batched(ids, 30) and small.batched(small.encode("A"), 5)
    expected_long, expected_short = small.decode(ids, 30)[0], _solo(small, "A", 5)
    got = await asyncio.gather(_tokens(small, long_prompt, 30), _tokens(small, "A", 5))
    assert got == [expected_long, expected_short]


async def test_a_cancelled_request_frees_its_slot_and_the_others_go_on(small):
    expected = _solo(small, PROMPTS[2], 10)
    stream = small.generate(small.encode(PROMPTS[0]), 50, stop_at_eos=False)
    other = asyncio.create_task(_tokens(small, PROMPTS[2], 10))
    first = [await anext(stream), await anext(stream)]
    await stream.aclose()  # the client went away after two tokens
    assert len(first) == 2
    assert await other == expected
    await asyncio.sleep(0)
    assert not any(small.decoder.busy) and small.batcher.idle()


async def test_sampling_with_a_seed_repeats_beside_other_traffic_and_temperature_zero_is_greedy(small):
    hot = Sampling(temperature=1.5, top_p=0.9, seed=7)
    alone = await _tokens(small, PROMPTS[1], 12, sampling=hot)
    crowded = await asyncio.gather(
        _tokens(small, PROMPTS[1], 12, sampling=hot), _tokens(small, PROMPTS[0], 9), _tokens(small, PROMPTS[3], 5)
    )
    assert crowded[0] == alone
    other_seed = await _tokens(small, PROMPTS[1], 12, sampling=Sampling(temperature=1.5, top_p=0.9, seed=8))
    assert other_seed != alone  # 12 draws at temperature 1.5 over a 1000-token vocabulary
    assert await _tokens(small, PROMPTS[1], 12, sampling=Sampling(temperature=0.0)) == _solo(small, PROMPTS[1], 12)
    narrow = await _tokens(small, PROMPTS[1], 12, sampling=Sampling(temperature=1.0, top_p=1e-6, seed=1))
    assert narrow == _solo(small, PROMPTS[1], 12)  # top-p that keeps one token is greedy


async def test_a_swap_between_steps_keeps_every_stream_token_identical(small):
    """Requests decode while a correct kernel is swapped in, then out: the tokens are those of no swap at all."""
    lengths = [14, 10, 12]
    expected = [_solo(small, PROMPTS[i], n) for i, n in enumerate(lengths)]
    entry = load_candidate(HERE / "rmsnorm_kernel.py")
    loop = asyncio.get_running_loop()
    third, served, steps_patched = asyncio.Event(), asyncio.Event(), []
    tick = small.batcher.tick

    def paced():  # a slow step, so the swap asked for after the third one lands while all three run
        out = tick()
        if small.batcher.stepped:
            steps_patched.append(is_patched(small.model.model.norm))
        if len(steps_patched) == 3:
            loop.call_soon_threadsafe(third.set)
        if steps_patched.count(True) == 2:
            loop.call_soon_threadsafe(served.set)
        time.sleep(0.01)
        return out

    def swap_in():  # between two steps: what is running then
        return sum(small.decoder.busy), small.engine_apply(rmsnorm_contract(), entry)

    small.batcher.tick = paced
    small.engine_apply = small.apply
    try:
        streams = [asyncio.create_task(_tokens(small, PROMPTS[i], n)) for i, n in enumerate(lengths)]
        await third.wait()
        running, handle = await small.exclusive(swap_in)
        await served.wait()  # two steps served with the kernel
        await small.exclusive(small.revert, handle)
        got = await asyncio.gather(*streams)
    finally:
        del small.batcher.tick, small.engine_apply
    assert running == 3 and steps_patched.count(True) >= 2  # the swap landed mid-stream and served steps
    assert got == expected


def test_which_attention_decodes_over_slots():
    """Full attention, a sliding window no slot outgrows (Mistral's 4096 tokens in 2048-token slots: plain causal),
    a window that binds (a ring, services.server.slot_plan), sliding beside full layers and Mamba states all decode
    over slots; an encoder-decoder, or a layer kind no slot holds, is refused with the reason."""
    from types import SimpleNamespace

    from transformers import Gemma3TextConfig, JambaConfig, LlamaConfig, MistralConfig

    from services.server.slot_cache import slot_cache_problem

    def model(config):
        return SimpleNamespace(config=config)

    assert slot_cache_problem(model(LlamaConfig(num_hidden_layers=2)), 2048) is None
    assert slot_cache_problem(model(MistralConfig(num_hidden_layers=2, sliding_window=4096)), 2048) is None
    assert slot_cache_problem(model(MistralConfig(num_hidden_layers=2, sliding_window=1024)), 2048) is None
    mixed = Gemma3TextConfig(
        num_hidden_layers=2, sliding_window=512, layer_types=["sliding_attention", "full_attention"]
    )
    assert slot_cache_problem(model(mixed), 2048) is None
    assert slot_cache_problem(model(JambaConfig(num_hidden_layers=2, num_experts=1)), 2048) is None
    odd = Gemma3TextConfig(num_hidden_layers=2)
    odd.layer_types = ["sliding_attention", "compressed_sparse_attention"]  # set after: 5.17 checks its RoPE per kind
    assert "kind 'compressed_sparse_attention' have no slot cache" in slot_cache_problem(model(odd), 2048)
    enc_dec = SimpleNamespace(num_hidden_layers=2, is_encoder_decoder=True)
    assert "encoder-decoder" in slot_cache_problem(model(enc_dec), 2048)
    assert "no config" in slot_cache_problem(model(None), 2048)


def test_a_key_replays_its_latest_graph_while_it_holds_only_served_kernels_else_its_stock_one():
    stock, one, two = (Graph(None, None, frozenset(k)) for k in ((), {1}, {1, 2}))
    assert runnable([two, stock], frozenset({1, 2})) is two  # fresh
    assert runnable([one, stock], frozenset({1, 2})) is one  # from before the second commit: it serves meanwhile
    assert runnable([two, stock], frozenset({1})) is stock  # the second reverted: the stock graph, never eager
    assert runnable([two, stock], frozenset()) is stock  # every swap reverted: the stock graph is fresh again
    assert runnable([two, None], frozenset({1})) is None  # no graph may run: the step runs eagerly
    assert runnable([None, None], frozenset()) is None


def test_the_batch_loop_stalls_its_streams_for_a_capture_at_most_once_in_its_interval():
    assert capture_due(math.inf, CAPTURE_UNDER_LOAD_S)  # none yet
    assert capture_due(CAPTURE_UNDER_LOAD_S, CAPTURE_UNDER_LOAD_S)
    assert not capture_due(CAPTURE_UNDER_LOAD_S - 0.01, CAPTURE_UNDER_LOAD_S)
