"""The sweep's recurring prompt: kernels keyed to equal rows farther apart than the judge's cases are refused.

Red-team round 11 (2026-12-05) got three kernels past the judge and the server's checks, each 20% off where a row
equals another of its call farther apart than the judge's repeated rows reach: a persistent RMSNorm looking at the
tile its program walks next (49-79 rows ahead on a CPU), the same on a residual norm's residual alone, a RoPE keyed
to positions 32-63 apart in its tile of 64; round 12 the same two at tiles of 32 rows, 97-159 ahead, past a prompt of
128. After the vocabulary, the server's sweep runs one prompt as long as the model's longest sequence whose tokens
recur at every distance up to its length (services.server.vocab_sweep.recurring_prompt), and names them."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch
from candidate_files import plan_of
from test_family_protocol import _preset_of, live

from services.core import kernels
from services.core.pb import events_pb2 as pb
from services.core.recurrence import nested_ruler
from services.server import vocab_sweep
from services.server.engine import Engine
from services.server.models import load_model

TESTS = Path(__file__).resolve().parent.parent
KEYED = {
    "row_reduction": TESTS / "server" / "rmsnorm_kernel_persistent_look_ahead.py",
    "residual_norm": TESTS / "ops" / "residual_norm" / "residual_equal_one_tile_ahead.py",
    "rotary": TESTS / "ops" / "rotary" / "rope_far_positions_in_a_tile.py",
}


def test_the_recurring_prompt_holds_one_token_at_every_distance_up_to_its_length():
    prompt = vocab_sweep.recurring_prompt(512, 128, seed=7)
    assert len(prompt) == 128 and len(set(prompt)) > 2
    at = {}
    for i, t in enumerate(prompt):
        at.setdefault(t, []).append(i)
    distances = {j - i for where in at.values() for i in where for j in where if j > i}
    assert distances == set(range(1, 128))
    assert [prompt[i] for i in nested_ruler(64)] == [prompt[0]] * len(nested_ruler(64))
    assert vocab_sweep.recurring_prompt(512, 128, seed=7) == prompt != vocab_sweep.recurring_prompt(512, 128, seed=8)


def _sweep(name: str, engine: Engine, tmp_path: Path, rows: int = 16) -> pb.ParityObservation:
    """The keyed kernel of `name` through the sweep; `rows`: its persistent plan's rows a tile (32: each program
    looks 128 rows ahead on a CPU, past a recurring prompt of 128: red-team round 12)."""
    proposal = live(name).proposal
    source = KEYED[name].read_text()
    plan = plan_of(source)
    if rows != 16:
        [launch] = plan.launches
        launch.constexprs["ROWS"], launch.grid = str(rows), f"min(sms, cdiv(rows, {rows}))"
    entry = kernels.candidate_wrapper(tmp_path, source, plan)
    observed = pb.ParityObservation()
    asyncio.run(vocab_sweep.sweep(engine, proposal.contract, kernels.bind(proposal.contract, entry), 5, observed))
    return observed


@pytest.mark.parametrize("name", sorted(KEYED))
def test_a_kernel_keyed_to_equal_rows_far_apart_is_named_by_the_recurring_prompt(name, tmp_path, monkeypatch):
    engine = Engine(load_model(_preset_of(name)[0], "cpu"))
    try:
        observed = _sweep(name, engine, tmp_path / "swept")
        # as long as the model's longest sequence (512 here): its distances reach any two rows of one prompt
        assert observed.sweep_recurring_tokens == engine.loaded.max_positions == 512
        assert observed.sweep_tokens == engine.loaded.vocab_size
        assert observed.sweep_calls_passed < observed.sweep_calls_checked and observed.sweep_wrong_tokens
        if name != "rotary":  # a persistent program looking 128 rows ahead, past a prompt of 128
            ahead = _sweep(name, engine, tmp_path / "ahead", rows=32)
            assert ahead.sweep_calls_passed < ahead.sweep_calls_checked and ahead.sweep_wrong_tokens
        if name == "row_reduction":  # without the recurring prompt every call passes: the vocabulary holds no pair
            monkeypatch.setattr(vocab_sweep, "recurring_prompt", lambda vocab, length, seed: [])
            alone = _sweep(name, engine, tmp_path / "alone")
            assert alone.sweep_calls_passed == alone.sweep_calls_checked > 0 and alone.sweep_recurring_tokens == 0
    finally:
        engine.close()
    assert torch.isfinite(torch.tensor(observed.sweep_max_abs_err))
