"""The batched lane for layers that are not full attention: a sliding window that binds inside the slot (tiny-gemma3:
a 16-token window, one sliding layer beside one full one) and Mamba layers whose past is a conv and a recurrent state
(tiny-jamba: one Mamba layer, one attention layer). Every check compares with the engine's eager decode of one
request alone (transformers' own dynamic cache, whose sliding layers and Mamba states are its own code)."""

from __future__ import annotations

import asyncio

import pytest
import torch

from services.server.batch_decode import SlotDecoder
from services.server.engine import Engine
from services.server.models import load_model
from services.server.slot_plan import CHUNKED, FULL, SLIDING, Visibility, slot_plan
from services.server.slot_state import SlotStateLayer

WINDOW = 16  # tiny-gemma3's sliding window
# prompt lengths: inside the window, just under it, past it twice over; each decodes past the window
LENGTHS = (3, 15, 40, 9)
NEW = 24


def _prompts(engine: Engine, seed: int = 1) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(1, engine.loaded.vocab_size, (n,), generator=gen).tolist() for n in LENGTHS]


@pytest.fixture(scope="module", params=["tiny-gemma3", "tiny-jamba"])
def kind_engine(request):
    engine = Engine(load_model(request.param, "cpu"), slots=4, slot_tokens=128)
    yield engine
    engine.close()


def test_the_lane_is_chosen_at_load_for_a_sliding_window_and_a_hybrid_model(kind_engine):
    assert kind_engine.lane_problem is None and kind_engine.batcher is not None
    plan = kind_engine.decoder.plan
    if kind_engine.loaded.name == "tiny-gemma3":  # the window binds: its layer keeps a 16-position ring
        assert plan.masks == {SLIDING: Visibility(SLIDING, WINDOW), FULL: Visibility()}
        assert [layer.keys.ring(128) for layer in plan.layers] == [WINDOW, 128]
    else:  # the Mamba layer holds a state, the attention layer keys
        assert [(layer.states, layer.keys) for layer in plan.layers] == [(1, None), (0, Visibility())]


async def test_concurrent_streams_of_different_lengths_get_the_tokens_each_gets_alone(kind_engine):
    prompts = _prompts(kind_engine)
    alone = [kind_engine.decode(ids, NEW)[0] for ids in prompts]
    assert all(len(set(tokens)) > 1 for tokens in alone)  # the tokens vary: equal means something

    async def served(ids):
        return [t async for chunk in kind_engine.generate(ids, NEW, stop_at_eos=False) for t in chunk]

    assert await asyncio.gather(*(served(ids) for ids in prompts)) == alone


def test_a_slot_reused_after_a_stream_ends_keeps_nothing_of_it(kind_engine):
    """Streams join at different steps, one ends and its slot takes a new prompt: every stream's tokens are its own,
    and the state a recurrent layer leaves in a reused slot is exactly a fresh decoder's for the same prompt."""
    engine = kind_engine
    prompts = _prompts(engine, seed=2)
    alone = [engine.decode(ids, NEW)[0] for ids in prompts]
    decoder = SlotDecoder(engine.model, "cpu", engine.loaded.dtype, 4, 128, engine._cache_kw)
    got: dict[int, list[int]] = {}
    slot_of = {0: 0, 1: 1}
    for i, row in zip((0, 1), decoder.prefill_many([0, 1], prompts[:2]), strict=True):
        got[i] = [int(row.argmax())]
    for step in range(NEW + 8):
        if step == 2:  # a third joins while two decode
            slot_of[2] = 2
            got[2] = [int(decoder.prefill(2, prompts[2]).argmax())]
        if step == 6:  # the first ends early; its slot takes the fourth prompt
            decoder.release(0)
            del slot_of[0]
            slot_of[3] = 0
            got[3] = [int(decoder.prefill(0, prompts[3]).argmax())]
            reused = [layer for layer in decoder.cache.layers if isinstance(layer, SlotStateLayer)]
        feeds = {slot: got[i][-1] for i, slot in slot_of.items() if len(got[i]) < NEW}
        if not feeds:
            break
        logits = decoder.step(feeds)
        for i, slot in slot_of.items():
            if slot in feeds:
                got[i].append(int(logits[slot].argmax()))
    assert got[0] == alone[0][: len(got[0])] and [got[i] for i in (1, 2, 3)] == alone[1:]

    if engine.loaded.name == "tiny-jamba":  # the reused slot's state is a fresh one's, not what slot 0 held
        fresh = SlotDecoder(engine.model, "cpu", engine.loaded.dtype, 4, 128, engine._cache_kw)
        again = SlotDecoder(engine.model, "cpu", engine.loaded.dtype, 4, 128, engine._cache_kw)
        again.prefill(1, prompts[0])
        for token in alone[0][:5]:
            again.step({1: token})
        again.compact()  # slot 1 -> 0: the used state moves into slot 0
        again.release(0)
        fresh.prefill(0, prompts[3])
        again.prefill(0, prompts[3])
        layers = [
            (a, b) for a, b in zip(fresh.cache.layers, again.cache.layers, strict=True) if isinstance(a, SlotStateLayer)
        ]
        assert layers and reused
        for a, b in layers:
            for x, y in zip(a._buffers(), b._buffers(), strict=True):
                assert torch.equal(x[0], y[0])


def test_a_step_that_does_not_feed_a_busy_slot_leaves_its_state_alone(kind_engine):
    """A canary steps one slot while a request holds another (serve_decode between two ticks): the request's state
    must not advance by the throwaway token its row is fed."""
    engine = kind_engine
    prompts = _prompts(engine, seed=3)
    alone = engine.decode(prompts[2], 8)[0]
    decoder = SlotDecoder(engine.model, "cpu", engine.loaded.dtype, 4, 128, engine._cache_kw)
    got = [int(decoder.prefill(1, prompts[2]).argmax())]
    got.append(int(decoder.step({1: got[-1]})[1].argmax()))
    decoder.prefill(0, prompts[0])
    for _ in range(3):  # the canary in slot 0; slot 1 busy, not fed
        decoder.step({0: 7})
    while len(got) < 8:
        got.append(int(decoder.step({1: got[-1]})[1].argmax()))
    assert got == alone


def test_each_layer_kind_gets_its_slot_and_what_no_slot_holds_is_named():
    """The plan is a pure function of the config: windows that bind are rings, those no slot outgrows are plain
    causal attention, and a layer kind without a slot is refused by name (the solo lane serves the model)."""
    from transformers import Gemma3TextConfig, MistralConfig

    gemma = Gemma3TextConfig(num_hidden_layers=2, sliding_window=16, layer_types=[SLIDING, FULL])
    assert slot_plan(gemma, 128).mask_dict and slot_plan(gemma, 16).masks == {SLIDING: Visibility(), FULL: Visibility()}
    mistral = slot_plan(MistralConfig(num_hidden_layers=2, sliding_window=4096), 2048)
    assert not mistral.mask_dict and mistral.masks == {SLIDING: Visibility()}  # a window no slot outgrows
    assert Visibility(CHUNKED, 8192).ring(2048) == 2048
    odd = Gemma3TextConfig(num_hidden_layers=2)
    odd.layer_types = [SLIDING, "compressed_sparse_attention"]  # set after: 5.17 checks its RoPE per kind
    assert slot_plan(odd, 128).startswith("layers of kind 'compressed_sparse_attention' have no slot cache")
