"""The served-load statistics and the run's verdict on them, pure: intervals of known samples, when a level has been
repeated enough, and a figure worse beyond its interval rolling the run's live swaps back (and nothing else)."""

from __future__ import annotations

import math

import pytest

from services.core import served_text
from services.core.events import Recorded, make_envelope
from services.core.pb import events_pb2 as pb
from services.profiler import served_plan, served_stats, served_verdict
from services.profiler.served_stats import Timed

PLAN = pb.ServedLoadPlan(streams=[1, 4], min_repeats=3, max_repeats=6, target_half_width=0.10)


def level(streams: int, rows: list[tuple[float, float, float]], failed: int = 0) -> pb.ServedLevel:
    """A level of repeats, each (tok/s, TTFT p99 ms, ITL p99 ms) of 8 requests."""
    out = pb.ServedLevel(streams=streams)
    for tps, ttft, itl in rows:
        out.repeats.append(
            pb.ServedRepeat(tokens_per_s=tps, ttft_p99_ms=ttft, itl_p99_ms=itl, requests=8, failed=failed, wall_s=1)
        )
    return out


def measure(*levels: pb.ServedLevel) -> pb.ServedLoadObservation:
    return pb.ServedLoadObservation(plan=PLAN, levels=levels, device="cpu")


STEADY_1 = [(400, 6.0, 3.0), (410, 6.2, 3.1), (390, 5.8, 2.9), (405, 6.1, 3.0)]
STEADY_4 = [(800, 16.0, 9.0), (820, 16.5, 9.2), (790, 15.5, 8.8), (810, 16.2, 9.1)]


def test_the_interval_is_students_t_over_the_repeats():
    i = served_stats.interval([10.0, 12.0, 14.0, 16.0], PLAN)
    sd = math.sqrt(sum((v - 13.0) ** 2 for v in (10, 12, 14, 16)) / 3)
    assert i.mean == 13.0 and i.repeats == 4
    assert i.half_width == pytest.approx(3.182 * sd / 2)  # t(0.975, 3 df) = 3.182
    assert not i.converged  # 3.3 is 25% of the mean, the target 10%
    tight = served_stats.interval([100.0, 101.0, 99.0], PLAN)
    assert tight.converged and tight.half_width == pytest.approx(4.303 * 1.0 / math.sqrt(3))
    one = served_stats.interval([5.0], PLAN)
    assert math.isinf(one.half_width) and not one.converged
    assert not served_stats.interval([100.0, 100.0], PLAN).converged  # tight, but fewer than min_repeats


def test_a_level_is_repeated_until_every_figure_converged_or_the_repeats_are_spent():
    assert served_stats.level_done(level(1, STEADY_1), PLAN)
    assert not served_stats.level_done(level(1, STEADY_1[:2]), PLAN)  # fewer than min_repeats
    noisy = [(400, 6.0, 3.0), (200, 12.0, 3.0), (600, 3.0, 3.0)]
    assert not served_stats.level_done(level(1, noisy), PLAN)
    assert served_stats.level_done(level(1, noisy * 2), PLAN)  # max_repeats: 6, recorded unconverged
    # a repeat of nothing but failures has no figures: it counts toward max_repeats, never toward an interval
    assert served_stats.figure_values(level(1, [(0, 0, 0)], failed=8), "throughput") == []


def test_a_repeats_figures_come_from_its_requests_timings():
    a = Timed(sent=0.0, asked_tokens=3, chunk_times=[0.1, 0.2, 0.4], output_tokens=3, ended=0.4)
    b = Timed(sent=0.0, asked_tokens=3, chunk_times=[0.3, 0.35, 0.5], output_tokens=3, ended=0.5)
    failed = Timed(sent=0.0, asked_tokens=3, error="RESOURCE_EXHAUSTED")
    r = served_stats.repeat_figures([a, b, failed], wall_s=0.5)
    assert r.tokens_per_s == pytest.approx(6 / 0.5) and r.requests == 3 and r.failed == 1
    assert r.ttft_p99_ms == pytest.approx(100 + 0.99 * 200)  # between 100 and 300 ms
    assert r.itl_p99_ms == pytest.approx(150 + 0.97 * 50)  # gaps 50, 100, 150, 200 ms: rank 2.97


def test_within_the_interval_the_swaps_are_kept():
    after = measure(level(1, [(395, 6.1, 3.0), (405, 6.0, 3.1), (400, 5.9, 2.9)]), level(4, STEADY_4))
    out = served_verdict.compare(measure(level(1, STEADY_1), level(4, STEADY_4)), after, ["swap-a"])
    assert not out.regressions and not out.rollback_swaps
    assert out.verdict.startswith("kept: no served figure worse beyond its 95% interval at 1, 4 streams")
    assert [lv.streams for lv in out.levels] == [1, 4]
    assert [f.name for f in out.levels[0].figures] == ["throughput", "ttft_p99", "itl_p99"]
    assert not any(f.worse for lv in out.levels for f in lv.figures)


def test_a_figure_worse_beyond_its_interval_rolls_the_runs_swaps_back_naming_it():
    slower_ttft = [(800, 24.0, 9.0), (815, 25.0, 9.1), (805, 24.5, 8.9)]  # TTFT p99 at 4 streams 50% up
    out = served_verdict.compare(
        measure(level(1, STEADY_1), level(4, STEADY_4)),
        measure(level(1, STEADY_1), level(4, slower_ttft)),
        ["swap-a", "swap-b"],
    )
    assert list(out.rollback_swaps) == ["swap-a", "swap-b"]
    assert len(out.regressions) == 1
    line = out.regressions[0]
    assert (
        line.startswith("TTFT p99 at 4 streams: 16.1 ± ") and " ms before, 24.5 ± " in line and line.endswith("after")
    )
    assert out.verdict == f"rolled back swap-a, swap-b: {line}"
    figure = out.levels[1].figures[1]
    assert figure.worse and figure.before.mean + figure.before.half_width < figure.after.mean - figure.after.half_width
    asked = served_verdict.rollback_requests(pb.RunCompleted(served=out))
    assert [r.swap_id for r in asked] == ["swap-a", "swap-b"]
    assert all(r.reason == f"{served_verdict.ROLLBACK_PREFIX}: {line}" and not r.failure for r in asked)


def test_lower_throughput_is_worse_and_higher_is_not():
    higher = [(500, 6.0, 3.0), (510, 6.1, 3.0), (505, 5.9, 3.0)]
    lower = [(300, 6.0, 3.0), (310, 6.1, 3.0), (305, 5.9, 3.0)]
    before = measure(level(1, STEADY_1))
    assert not served_verdict.compare(before, measure(level(1, higher)), ["s"]).regressions
    worse = served_verdict.compare(before, measure(level(1, lower)), ["s"])
    assert (
        worse.regressions[0].startswith("throughput at 1 streams: 401.2 ± ") and "tok/s after" in worse.regressions[0]
    )


def test_overlapping_intervals_are_noise_and_an_unmeasured_spread_decides_nothing():
    wide = [(300, 6.0, 3.0), (500, 6.1, 3.0), (380, 5.9, 3.0)]  # its mean lower, its interval overlapping
    assert not served_verdict.compare(measure(level(1, STEADY_1)), measure(level(1, wide)), ["s"]).regressions
    once = [(100, 60.0, 30.0)]  # one repeat: no interval, nothing can be told from noise
    assert not served_verdict.compare(measure(level(1, STEADY_1)), measure(level(1, once)), ["s"]).regressions


def test_failures_after_and_none_before_are_a_regression():
    out = served_verdict.compare(measure(level(4, STEADY_4)), measure(level(4, STEADY_4, failed=2)), ["s"])
    assert out.regressions == ["requests at 4 streams: 8 of 32 failed after, none before"] and out.rollback_swaps


def test_an_untimed_policy_records_a_regression_without_rolling_back():
    lower = [(300, 6.0, 3.0), (310, 6.1, 3.0), (305, 5.9, 3.0)]
    out = served_verdict.compare(measure(level(1, STEADY_1)), measure(level(1, lower)), ["s"], acts=False)
    assert out.regressions and not out.rollback_swaps and out.verdict.startswith("kept, the policy making no speed")
    untimed = pb.SwapPolicy(name="cpu-untimed")
    assert not served_verdict.acts_on(untimed, "cpu") and served_verdict.acts_on(untimed, "cuda")
    assert served_verdict.acts_on(pb.SwapPolicy(name="gpu-default"), "cpu")
    # a regression with no live swap of the run (all rolled back already): nothing asked
    none = served_verdict.compare(measure(level(1, STEADY_1)), measure(level(1, lower)), [])
    assert none.regressions and not none.rollback_swaps and none.verdict.startswith("worse with no live swap")


def _rec(seq: int, msg, producer: str = "server") -> Recorded:
    env = make_envelope("r1", msg, producer=producer, time_ns=seq, causation_id=f"c{seq}")
    return Recorded(seq=seq, env=env)


def test_the_live_swaps_are_the_runs_commits_not_rolled_back():
    log = [
        _rec(1, pb.SwapCommitted(swap_id="a")),
        _rec(2, pb.SwapCommitted(swap_id="b")),
        _rec(3, pb.SwapRolledBack(swap_id="a")),
        _rec(4, pb.SwapCommitted(swap_id="b")),  # a fact twice counts once
    ]
    assert served_verdict.live_swaps(log) == ["b"]


def test_the_plan_is_the_devices_unless_the_run_asked_its_own_levels():
    assert list(served_plan.plan_for(None, "cuda").streams) == [1, 16, 64]
    cpu = served_plan.plan_for(pb.RunRequested(), "cpu")
    assert list(cpu.streams) == [1, 4] and cpu.min_repeats <= cpu.max_repeats and cpu.target_half_width == 0.10
    assert list(served_plan.plan_for(pb.RunRequested(served_streams=[2, 8]), "cuda").streams) == [2, 8]
    assert served_plan.streams_problem([1, 16, 64]) == ""
    assert "1..64 streams" in served_plan.streams_problem([0, 65])
    assert "at most 4" in served_plan.streams_problem([1, 2, 3, 4, 5])
    assert "repeat" in served_plan.streams_problem([4, 4])


def test_the_served_lines_read_each_level_and_the_verdict():
    out = served_verdict.compare(
        measure(level(1, STEADY_1)), measure(level(1, [(300, 6.0, 3.0), (310, 6.1, 3.0), (305, 5.9, 3.0)])), ["s"]
    )
    lines = served_text.run_lines(pb.RunCompleted(served=out))
    assert lines[0] == "served 1 streams: 401 -> 305 tok/s (worse), TTFT p99 6.0 -> 6.0 ms, ITL p99 3.0 -> 3.0 ms"
    assert lines[1] == out.verdict and lines[1].startswith("rolled back s: throughput at 1 streams")
    assert served_text.run_lines(pb.RunCompleted()) == []  # a run from before schema 11
