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


# ---------------------------------------------------------------- timing that cannot be cached (pure parts)


def test_timed_buffers_hold_contents_of_their_own_drawn_from_the_judgings_nonce():
    from services.judge.timing import buffer_seed, fresh_buffers

    seeds = {buffer_seed(nonce, s, b) for nonce in (1, 2) for s in range(4) for b in range(32)}
    assert len(seeds) == 2 * 4 * 32 and all(0 <= s < 2**63 for s in seeds)
    buffers = fresh_buffers((3, 64), torch.bfloat16, 4, nonce=123, shape_index=1, device="cpu")
    assert all(b.dtype == torch.bfloat16 and b.shape == (3, 64) for b in buffers)
    assert len({b.float().sum().item() for b in buffers}) == 4  # no two alike: not clones of one tensor
    again = fresh_buffers((3, 64), torch.bfloat16, 4, nonce=123, shape_index=1, device="cpu")
    assert all(torch.equal(a, b) for a, b in zip(buffers, again, strict=True))  # reproducible from the nonce
    other = fresh_buffers((3, 64), torch.bfloat16, 4, nonce=124, shape_index=1, device="cpu")
    assert not any(torch.equal(a, b) for a, b in zip(buffers, other, strict=True))  # another judging, other contents
    later = fresh_buffers((3, 64), torch.bfloat16, 4, nonce=123, shape_index=1, device="cpu", first=4)
    assert not any(torch.equal(a, b) for a, b in zip(buffers, later, strict=True))  # the refresh draws anew


@pytest.mark.parametrize(
    "poisoned,others,ok",
    [
        (10.4, [10.0, 10.2, 9.9], True),  # honest: what the others took
        (1.9, [1.5, 1.6, 1.5], True),  # a tiny call's jitter, within the slack
        (40.0, [10.0, 10.2, 9.9], False),  # computed when poisoned, skipped the others: 4x
        (31.0, [10.0, 10.2, 9.9], False),  # it read the whole output to decide: ~3x
        (2.0, [10.0, 10.2, 9.9], False),  # much faster when poisoned
    ],
)
def test_the_poisoned_replay_must_take_what_the_others_took(poisoned, others, ok):
    from services.judge.timing import in_band

    assert in_band(poisoned, others) is ok


def test_poisoning_fills_every_output_a_graph_writes():
    from services.judge.timing import poison_outputs

    a, b, c = torch.zeros(3), torch.zeros(2, dtype=torch.bfloat16), torch.zeros(2, dtype=torch.int32)
    poison_outputs([a, (b, c)])
    assert torch.isnan(a).all() and torch.isnan(b.float()).all() and (c == -1).all()


def test_a_write_to_a_timed_input_is_named():
    from services.judge.timing import TimedInputModified, unchanged_inputs

    kept = [torch.randn(4), torch.randn(4)]
    now = [t.clone() for t in kept]
    unchanged_inputs(now, kept, "its input buffer")
    now[1][2] += 1
    with pytest.raises(TimedInputModified) as caught:
        unchanged_inputs(now, kept, "its input buffer")
    assert caught.value.rule == "modified-input" and "its input buffer 1" in str(caught.value)
    with pytest.raises(TimedInputModified) as caught:
        unchanged_inputs(now, kept, "state")
    assert caught.value.rule == "modified-weights"


@pytest.mark.gpu
def test_a_kernel_that_keeps_a_finite_output_is_caught_by_the_poisoned_and_fresh_replays():
    """On the GPU: an honest op passes the poisoned replays and the fresh-contents replay; an op that keeps whatever
    finite value its output holds passes the poisoned one (it computes into NaN) and fails the fresh one."""
    from services.judge.timing import capture, fresh_buffers, poisoned_replays

    def honest(x):
        return x * 2.0

    def trusting(x):  # its outputs live beside its inputs, allocated once: keep what is finite there
        out = trusting.kept[x.data_ptr()]
        torch.where(torch.isnan(out), x * 2.0, out, out=out)
        return out

    shape = (4096, 1024)
    for fn, caught in ((honest, False), (trusting, True)):
        buffers = fresh_buffers(shape, torch.float32, 4, nonce=7, shape_index=0)
        trusting.kept = {b.data_ptr(): torch.full_like(b, float("nan")) for b in buffers}
        graph = capture(fn, buffers, 8)
        others = [graph.per_call_us(5) for _ in range(3)]
        poisoned_replays(graph, honest, others, "4096x1024")  # both compute into NaN: right, and in time
        refreshed = fresh_buffers(shape, torch.float32, 4, nonce=7, shape_index=0, first=4)
        for buffer, fresh in zip(buffers, refreshed, strict=True):
            buffer.copy_(fresh)
        graph.graph.replay()
        torch.cuda.synchronize()
        if caught:
            with pytest.raises(ReplayMismatch, match="on fresh inputs"):
                check_replay(graph, honest, every=True, when="on fresh inputs, ")
        else:
            check_replay(graph, honest, every=True, when="on fresh inputs, ")
