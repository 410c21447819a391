"""Timing rules that need no GPU: what gets flagged and re-measured, and what is not believed.

The measurements themselves run on a GPU (tests/judge/test_judge_gpu.py, bench/judge_corpus.py).
"""

from __future__ import annotations

import pytest
import torch

from services.core.pb import events_pb2 as pb
from services.judge.timing import (
    FIGURE_BUDGET_US,
    GRAPH_BYTES,
    GRAPH_CALLS,
    GRAPH_REPLAYS,
    HOST_CALLS,
    MIN_HOST_CALLS,
    MIN_REPLAYS,
    Captured,
    Counts,
    ReplayMismatch,
    check_replay,
    counts_for,
    flag,
    graph_calls,
)


def _row(candidate, eager, compile_=0.0, native=0.0, floor=0.0) -> pb.TimingRow:
    return pb.TimingRow(
        shape="32768x1536",
        candidate_us=candidate,
        eager_us=eager,
        compile_us=compile_,
        native_us=native,
        floor_us=floor,
    )


def _never() -> float:
    raise AssertionError("an unremarkable row must not be re-measured")


def test_an_ordinary_row_is_left_alone():
    row = _row(53.0, 663.0 / 2, 68.6, 65.2, floor=49.6)
    flag(row, _never)
    assert not row.remeasured and not row.flag and row.candidate_us == 53.0


def test_over_ten_times_faster_is_re_measured_and_the_slower_figure_kept():
    row = _row(53.0, 663.0, 68.6, 65.2, floor=49.6)
    flag(row, lambda: 55.0)
    assert row.remeasured and row.candidate_us == 55.0
    assert row.flag.startswith("checked: 12.5x over eager") and "kept 55.00 us" in row.flag


def test_faster_than_the_copy_ceiling_is_not_believed():
    row = _row(20.0, 663.0, 68.6, 65.2, floor=49.6)
    flag(row, lambda: 21.0)
    assert row.remeasured and row.flag.startswith("implausible:") and "under the copy-ceiling floor" in row.flag
    row = _row(20.0, 663.0, 68.6, 65.2, floor=49.6)
    flag(row, lambda: 51.0)  # the second method finds the honest time: kept, and believed
    assert row.flag.startswith("checked:") and row.candidate_us == pytest.approx(51.0)


def test_a_wall_clock_under_the_copy_ceiling_is_not_believed_even_when_the_graph_is():
    row = _row(20.0, 663.0, 68.6, 65.2, floor=49.6)
    row.candidate_host_us = 30.0  # no graph trick moves a wall clock: 30 us for 49.6 us of bytes cannot be
    flag(row, lambda: 51.0)
    assert row.flag.startswith("implausible:") and "host-inclusive time still under the copy ceiling" in row.flag


def test_the_graph_captures_fewer_calls_where_their_outputs_would_not_fit():
    assert graph_calls(9216.0) == GRAPH_CALLS  # one decode row
    assert graph_calls(GRAPH_BYTES // 5) == 5
    assert graph_calls(8.0 * GRAPH_BYTES) == 2  # never fewer than two


def test_a_fast_function_is_sampled_in_full():
    assert counts_for(1.5, GRAPH_CALLS) == Counts(GRAPH_REPLAYS, HOST_CALLS)  # a decode row
    assert counts_for(650.0, GRAPH_CALLS) == Counts(GRAPH_REPLAYS, HOST_CALLS)  # eager at 32768 rows
    assert counts_for(0.0, GRAPH_CALLS) == Counts(GRAPH_REPLAYS, HOST_CALLS)  # an estimate that read nothing


def test_a_slow_function_is_sampled_less_but_never_below_the_minimums():
    slow = counts_for(6_800.0, GRAPH_CALLS)  # the slowest honest kernel of the corpus, per call
    assert slow == Counts(MIN_REPLAYS, int(FIGURE_BUDGET_US // 6_800.0))
    assert MIN_HOST_CALLS < slow.host_calls < HOST_CALLS
    assert counts_for(500.0, 100) == Counts(5, HOST_CALLS)  # replays shrink with the calls a graph holds
    crawl = counts_for(100_000.0, GRAPH_CALLS)  # 100 ms a call
    assert crawl == Counts(MIN_REPLAYS, MIN_HOST_CALLS)
    # what one round costs such a kernel stays bounded: seconds, not the minutes of full counts
    round_s = (crawl.replays * GRAPH_CALLS + crawl.host_calls) * 0.1
    assert round_s < 10 < (GRAPH_REPLAYS * GRAPH_CALLS + HOST_CALLS) * 0.1


def _captured(outputs, inputs) -> Captured:
    return Captured(graph=None, calls=len(outputs), inputs=inputs, outputs=outputs)


def test_the_timed_graph_must_have_computed_what_the_module_computes():
    module = torch.nn.LayerNorm(8)
    inputs = [torch.randn(2, 8) for _ in range(3)]
    check_replay(_captured([module(x) for x in inputs], inputs), module)  # honest: passes silently
    cheat = [module(x) for x in inputs]
    cheat[-1] = torch.zeros(2, 8)  # the last captured call did no work
    with pytest.raises(ReplayMismatch, match="captured call 3 of 3 is off by"):
        check_replay(_captured(cheat, inputs), module)
    with pytest.raises(ReplayMismatch):  # not a tensor at all
        check_replay(_captured([None, None], inputs[:2]), module)


def test_the_replay_check_compares_in_the_input_dtype_like_the_correctness_layer():
    from transformers.models.qwen2.modeling_qwen2 import Qwen2RMSNorm

    module = Qwen2RMSNorm(64)  # an fp32 weight on bf16 activations: the output is fp32
    inputs = [torch.randn(2, 64, dtype=torch.bfloat16) for _ in range(2)]
    # An honest kernel lands within a bf16 rounding step of the module, far outside fp32's tolerance.
    outputs = [module(x) * (1 + 2e-3) for x in inputs]
    assert outputs[0].dtype == torch.float32
    check_replay(_captured(outputs, inputs), module)
