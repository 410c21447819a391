"""The vocabulary sweep's pure parts: which tokens go in which call, and how its findings decide a swap."""

from __future__ import annotations

import torch

from services.core.pb import events_pb2 as pb
from services.server.domain import parity_problems
from services.server.vocab_sweep import Tally, chunks


def test_every_token_goes_once_in_calls_of_doubling_rows_in_an_order_drawn_from_the_seed():
    calls = chunks(1000, seed=1, largest=128)
    assert sorted(t for call in calls for t in call) == list(range(1000))
    assert [len(c) for c in calls] == [1, 2, 4, 8, 16, 32, 64] + [128] * 6 + [105]
    assert calls != chunks(1000, seed=2, largest=128) and calls == chunks(1000, seed=1, largest=128)


def test_a_wrong_row_names_its_token_and_a_call_without_a_row_per_token_names_its_first():
    tally = Tally()
    want = torch.ones(3, 1, 4)
    got = want.clone()
    got[1, 0, 2] = 0.5
    tally.compare(got, want, [7, 8, 9])
    tally.compare((want[:1], want), (want[:1], want), [7, 8, 9])  # a tuple of outputs, all right
    tally.compare(torch.ones(2, 4) * 2, torch.ones(2, 4), [5, 6, 9])  # rows are not the tokens
    assert (tally.checked, tally.passed, tally.wrong) == (3, 1, [8, 5])
    assert tally.max_abs == 1.0


def test_a_sweep_that_found_a_wrong_row_refuses_the_swap_by_itself():
    observed = pb.ParityObservation(
        sweep_tokens=512, sweep_calls_checked=12, sweep_calls_passed=11, sweep_max_abs_err=0.3, static_ok=True
    )
    observed.sweep_wrong_tokens.append(63)
    assert parity_problems(observed) == [
        "vocabulary sweep at position 0: 11/12 calls over 512 tokens within tolerance (max abs err 0.3); wrong on "
        "token 63"
    ]
    observed.sweep_max_position = 300  # each token at a drawn position (a rotary model's)
    assert parity_problems(observed)[0].startswith("vocabulary sweep at positions 0-300: 11/12 calls")
    clean = pb.ParityObservation(sweep_tokens=512, sweep_calls_checked=12, sweep_calls_passed=12)
    assert not any("vocabulary" in p for p in parity_problems(clean))
