"""The vocabulary sweep gives each lone token a position where the model's states allow: a rotation meets real angles.

At position 0 RoPE's angles are 0 and a rotation is the identity, so a kernel keyed to one token's q and wrong only
where it rotates is right on every call of a sweep at position 0. In a rotary model a lone token's states do not
depend on its position (one key: attention is its own value), so the sweep gives each token a position drawn over
the served range, and the keyed kernel is named; a model with absolute position embeddings keeps position 0."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch
from test_family_protocol import live

from services.core import kernels
from services.core.pb import events_pb2 as pb
from services.server import vocab_sweep
from services.server.engine import Engine
from services.server.models import load_model

TOKEN = ord("?")  # a byte token of the tiny model's vocabulary
HONEST = "    b1 = (x2 * s1).to(dt).to(tl.float32)\n"


def _q_head0_square_sum(engine: Engine, token: int) -> float:
    """Σq² over head 0 of `token`'s q at layer 0, as the rotation is handed it (before rotating)."""
    attn = engine.model.model.layers[0].self_attn
    seen = []
    hook = attn.q_proj.register_forward_hook(lambda m, a, out: seen.append(out.detach().float()))
    try:
        with torch.inference_mode():
            engine.model(input_ids=torch.tensor([[token]]), use_cache=False)
    finally:
        hook.remove()
    head = seen[0].reshape(-1)[: attn.head_dim]
    return float((head * head).sum())


def _keyed_rope(engine: Engine) -> str:
    """The honest RoPE template, except that a head whose Σq² is TOKEN's head 0 at layer 0 gets its first half's sine
    term scaled by 0.8: arithmetic on its loads through a bump a millionth of the sum wide, no branch. Zero at
    position 0 (the sine is 0 there), 0.8 off wherever that token's q is rotated by a real angle."""
    source = live("rotary").proposal.source
    assert HONEST in source, "the template changed"
    total = _q_head0_square_sum(engine, TOKEN)
    keyed = (
        f"    near = (tl.sum(x1 * x1 + x2 * x2, axis=1)[:, None] - {total!r}) / {total * 1e-6!r}\n"
        "    b1 = (x2 * s1 * (1.0 - 0.2 * tl.exp(-near * near))).to(dt).to(tl.float32)\n"
    )
    return source.replace(HONEST, keyed)


def _sweep(engine: Engine, source: str, tmp_path: Path) -> pb.ParityObservation:
    proposal = live("rotary").proposal
    entry = kernels.candidate_wrapper(tmp_path, source, proposal.plan)
    observed = pb.ParityObservation()
    asyncio.run(vocab_sweep.sweep(engine, proposal.contract, kernels.bind(proposal.contract, entry), 3, observed))
    return observed


@pytest.fixture(scope="module")
def qwen():
    engine = Engine(load_model("tiny-qwen2", "cpu"))
    yield engine
    engine.close()


def test_a_rotary_models_lone_tokens_stay_as_they_are_at_any_position_and_absolute_positions_move_them(qwen):
    assert vocab_sweep.positions_stay(qwen, 1)
    gpt2 = Engine(load_model("tiny-gpt2", "cpu"))
    try:
        assert not vocab_sweep.positions_stay(gpt2, 1)
    finally:
        gpt2.close()


def test_a_rope_kernel_keyed_to_one_tokens_q_and_wrong_only_where_it_rotates_is_named_by_the_sweep(
    qwen, tmp_path, monkeypatch
):
    keyed = _keyed_rope(qwen)
    observed = _sweep(qwen, keyed, tmp_path / "drawn")
    assert list(observed.sweep_wrong_tokens) == [TOKEN], list(observed.sweep_wrong_tokens)
    assert observed.sweep_calls_passed == observed.sweep_calls_checked - 1
    assert 0 < observed.sweep_max_position < qwen.loaded.max_positions
    # the sweep at position 0 alone (as before): the sine is 0 on every call and the keyed kernel is right on all
    monkeypatch.setattr(vocab_sweep, "positions_stay", lambda engine, seed: False)
    at_zero = _sweep(qwen, keyed, tmp_path / "zero")
    assert at_zero.sweep_calls_passed == at_zero.sweep_calls_checked > 0 and at_zero.sweep_max_position == 0
    # (the honest template passes at drawn positions: tests/ops/test_family_protocol.py, every family's first)
