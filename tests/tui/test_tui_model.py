"""The fold behind every screen, the replay player and the figures, as pure functions of recorded logs."""

from __future__ import annotations

import io
import math
import random
from dataclasses import replace

import pytest
import tui_fixtures as fx
from rich.console import Console

from services.core.events import Recorded
from services.core.logfile import read_log, write_log
from services.core.pb import events_pb2 as pb
from tui import figures
from tui.model import MAX_METRIC_POINTS, STEP_NAMES, Mark, State, evolve, fold
from tui.payload import payload_lines
from tui.player import INSTANT, MAX_GAP_S, SPEEDS, Player, player_for
from tui.widgets.candidate_detail import contract_renderable, evidence_renderable, source_renderable
from tui.widgets.candidates import candidate_cells
from tui.widgets.pipeline import pipeline_renderable
from tui.widgets.profile import profile_renderable
from tui.widgets.serving import column_of, columns, mark_row, serving_lines, sparkline

LOGS = {name: build() for name, build in fx.BUILT_LOGS.items()}
LOGS.update({f"data/{p.name}": read_log(p) for p in fx.data_files()})


def test_swapped_run_folds_into_pipeline_candidates_and_outcome():
    state = fold(fx.swapped_log())
    run = state.runs[fx.SWAPPED_RUN]
    assert state.order == (fx.SWAPPED_RUN,)
    assert (run.model, run.device, run.status, run.outcome) == ("qwen2.5-1.5b-shape", "NVIDIA H200", "done", "swapped")
    assert [s.status for s in run.steps] == ["done"] * len(STEP_NAMES)
    profile = run.step("profile")
    assert profile.reason.startswith("Qwen2RMSNorm: 31% of the step")
    assert profile.ended_ns - profile.started_ns == int(6.4e9)
    assert run.step("swap").reason.startswith("swap-3c1f: patched 57 modules")
    assert [c.candidate_id for c in run.candidates] == ["c-5e1a0b", "c-9d33f1", "c-41be07"]
    best, wrong, llm = run.candidates
    assert (best.origin, best.origin_detail, best.reward, best.checks, best.swap) == (
        "skill", "skill-rr-7f3a", 3, "12/12", "committed",
    )  # fmt: skip
    assert best.verdict == "fastest" and llm.verdict == "faster" and llm.origin == "llm"
    # speed-ups are geometric means over the timed shapes, against each baseline
    rows = best.judged.msg.observed.timing.rows
    expect = math.exp(sum(math.log(r.eager_us / r.candidate_us) for r in rows) / len(rows))
    assert best.vs_eager == pytest.approx(expect)
    assert best.vs_native == pytest.approx(best.judged.msg.speedup_vs_best)
    # % of copy bandwidth at the largest shape: 2 x 32768 x 1536 bf16 bytes over the time, over 4,275 GB/s
    largest = max(rows, key=lambda r: figures.shape_numel(r.shape))
    assert best.copy_fraction == pytest.approx(2 * 32768 * 1536 * 2 / (largest.candidate_us * 1e-6) / 4.275e12)
    assert wrong.reward == -1 and wrong.vs_eager is None and wrong.copy_fraction is None
    assert wrong.rejection.startswith("correctness: 3x1531 seed 1")
    assert [t.class_path.rsplit(".", 1)[-1] for t in run.targets][:2] == ["Qwen2RMSNorm", "Qwen2MLP"]
    assert [t.chosen for t in run.targets] == [True, False, False, False]
    assert len(state.metrics) == 40 and [m.kind for m in state.marks] == ["swap"]
    assert (run.tokens_per_s_before, run.tokens_per_s_after) == (14.2, 36.9)


def test_rollback_run_marks_the_swap_and_its_rollback():
    state = fold(fx.rollback_log())
    run = state.runs[fx.ROLLBACK_RUN]
    assert run.outcome == "rolled_back" and run.step("swap").status == "failed"
    assert "p95 latency regressed" in run.step("swap").reason
    assert [m.kind for m in state.marks] == ["swap", "rollback"]
    assert run.candidates[0].swap == "rolled back"


def test_a_run_without_a_target_skips_every_later_step():
    run = fold([Recorded(i + 1, e) for i, e in enumerate(fx.no_target_run())]).runs["20261101-123000-feed01"]
    assert [s.status for s in run.steps] == ["done", "skipped", "skipped", "skipped", "skipped"]
    assert run.step("profile").reason == "no supported target above 5% of the step"
    assert run.outcome == "no_target" and run.candidates == ()


def test_unknown_event_is_kept_and_shown_as_unknown_not_a_crash():
    state = fold(fx.unknown_log())
    run = state.runs[fx.UNKNOWN_RUN]
    assert state.unknown_events == 1 and run.unknown_events == 1
    alien = next(r for r in run.events if not r.known)
    assert alien.type == "KernelAutotuned" and "unknown event type" in alien.summary
    assert run.step("profile").status == "done"  # the events after it still fold
    assert "is unknown to this TUI" in payload_lines(alien.rec, known=False)[0]


def test_a_payload_that_does_not_parse_is_unknown_too():
    good = fx.swapped_log(with_metrics=False)[0]
    env = type(good.env)()
    env.CopyFrom(good.env)
    env.payload = b"\xff\xff\xff"
    state = fold([Recorded(1, env)])
    assert state.unknown_events == 1 and not state.runs[env.run_id].events[0].known


def test_empty_log_is_an_empty_state():
    assert fold([]) == State()


@pytest.mark.parametrize("name", sorted(LOGS))
def test_fold_is_incremental_and_never_mutates(name):
    """Folding a prefix and then the rest is folding the whole: live (batches) and replay (one by one) agree."""
    log = LOGS[name]
    whole = fold(log)
    for cut in range(0, len(log) + 1, max(1, len(log) // 7)):
        before = fold(log[:cut])
        snapshot = repr(before)
        assert fold(log[cut:], before) == whole
        assert repr(before) == snapshot  # the earlier state is untouched
    assert whole.events_seen == len(log)


def test_unchanged_runs_keep_their_identity():
    log = fx.all_runs_log()
    state = fold(log[:-1])
    after = evolve(state, log[-1])
    changed = log[-1].env.run_id
    for run_id in state.order:
        if run_id != changed:
            assert after.runs[run_id] is state.runs[run_id]


def test_metrics_are_capped_to_the_newest_points():
    metrics = fx.server_metrics(fx.T0, MAX_METRIC_POINTS + 25, None, 10.0, 10.0)
    state = fold([Recorded(i + 1, e) for i, e in enumerate(metrics)])
    assert len(state.metrics) == MAX_METRIC_POINTS
    assert state.metrics[-1].time_ns == metrics[-1].time_unix_ns
    assert state.order == ()  # metrics are not a run


def test_exported_file_round_trips(tmp_path):
    log = fx.all_runs_log()
    path = tmp_path / "run.jsonl"
    write_log(path, log)
    assert fold(read_log(path)) == fold(log)


# ------------------------------------------------------------------ player


def test_player_waits_the_recorded_gap_over_the_speed_and_shortens_idle_gaps():
    log = fx.swapped_log(with_metrics=False)
    gaps = [(b.env.time_unix_ns - a.env.time_unix_ns) / 1e9 for a, b in zip(log, log[1:], strict=False)]
    p = Player(len(log), position=1)
    assert p.delay_before_next(log) == pytest.approx(min(gaps[0], MAX_GAP_S))
    assert p.faster().delay_before_next(log) == pytest.approx(min(gaps[0], MAX_GAP_S) / 2)
    assert Player(len(log)).delay_before_next(log) == 0.0  # the first event comes at once
    assert replace(p, speed_index=SPEEDS.index(INSTANT)).delay_before_next(log) == 0.0


def test_player_speeds_and_positions():
    p = player_for(10, 0.5)
    assert p.speed_label == "0.5x" and p.slower().speed == 0.5
    fastest = p
    for _ in SPEEDS:
        fastest = fastest.faster()
    assert fastest.speed_label == "instant"
    assert player_for(10, INSTANT).speed == INSTANT and player_for(10, 3).speed == 2.0
    assert p.advanced(25).position == 10 and p.advanced(25).finished
    assert p.advanced(4).restarted().position == 0
    with pytest.raises(ValueError, match="speed must be > 0"):
        player_for(3, 0)


# ------------------------------------------------------------------ figures and the timeline


def test_figures_handle_missing_numbers():
    assert figures.shape_numel("(2, 7, 256)") == 3584 and figures.shape_numel("?") == 0
    assert figures.speedup_over([pb.TimingRow(shape="1x8", candidate_us=0, eager_us=3)], "eager_us") is None
    assert figures.copy_bandwidth_fraction([pb.TimingRow(shape="1x8", candidate_us=1)], 2, 0) is None
    assert figures.fmt_us(1_330_000) == "1.33s" and figures.fmt_us(2300) == "2.3ms" and figures.fmt_us(0) == "-"
    assert figures.fmt_clock(fx.T0) == "12:00:00.000"


def test_sparkline_columns_fill_the_width_and_marks_sit_over_the_first_point_after_them():
    assert columns([1, 2], 4) == [1, 1, 2, 2]
    assert columns([1, 3, 5, 7], 2) == [2, 6]
    assert sparkline([0, 1]) == "▁█" and sparkline([5, 5]) == "▄▄"
    assert column_of(2, 4, 8) == 4 and column_of(4, 4, 8) == 7
    times = [10, 20, 30, 40]
    row = mark_row(times, [Mark(25, "swap", "r", ""), Mark(5, "rollback", "r", "")], 8)
    assert row.plain == "    ▲   "  # the mark before the window is left out


def test_events_in_any_order_or_missing_fold_and_render_without_error():
    """A log cut short or out of order (a judged candidate never proposed, a swap before its verdict)."""
    console = Console(file=io.StringIO(), width=80)
    rng = random.Random(3)
    log = fx.all_runs_log() + fx.rollback_log()[-12:]
    for _ in range(15):
        sample = rng.sample(log, rng.randint(1, len(log)))
        state = fold(sample)
        for run in state.runs.values():
            console.print(pipeline_renderable(run), profile_renderable(run))
            for c in run.candidates:
                candidate_cells(c)
                console.print(source_renderable(c), contract_renderable(c), evidence_renderable(c, run))
        for line in serving_lines(state.metrics, state.marks, 60, compact=False):
            console.print(line)


def test_a_failed_and_a_cancelled_run_say_so_and_stop_their_pipeline():
    failed = fx.RunLog("20261130-000000-fa11ed", fx.T0)
    asked = failed.add(pb.RunRequested(model="tiny-qwen2", decode_tokens=100_000), "cli", 0)
    observed = pb.RunFailureObservation(service="profiler", error="INVALID_ARGUMENT: exceeds the model's positions")
    failed.add(
        pb.RunFailed(observed=observed, reason="profiler could not answer RunRequested", failed_trigger="RunRequested"),
        "profiler",
        0.5,
        asked,
    )
    cancelled = fx.RunLog("20261130-000100-cace11", fx.T0 + 60 * fx.S)
    cancelled.add(pb.RunRequested(model="tiny-qwen2"), "cli", 0)
    cancelled.add(pb.RunCancelled(reason="wrong model", requested_by="yantra-cli"), "cli", 1.0)
    state = fold(fx._recorded(failed.envs + cancelled.envs))

    run = state.runs[failed.run_id]
    assert (run.status, run.outcome) == ("failed", "failed")
    assert run.step("profile").status == "failed" and "could not answer RunRequested" in run.step("profile").reason
    assert all(s.status == "skipped" for s in run.steps[1:])
    run = state.runs[cancelled.run_id]
    assert (run.status, run.outcome) == ("cancelled", "cancelled")
    assert run.step("profile").reason == "cancelled: wrong model"
    assert run.events[-1].summary == "by yantra-cli: wrong model"


def test_a_candidates_launch_plan_is_shown_with_its_contract():
    from services.ops.row_reduction import template as rmsnorm

    run = fx.RunLog("20261201-000000-91a4ed", fx.T0)
    asked = run.add(pb.RunRequested(model="tiny-qwen2"), "cli", 0)
    config = pb.TemplateConfig(template=rmsnorm.TEMPLATE, num_warps=8, rows_per_program=2)
    proposed = pb.CandidateProposed(
        candidate_id="c1-abc", target_class="Qwen2RMSNorm", source=rmsnorm.render(config), plan=rmsnorm.plan(config)
    )
    run.add(proposed, "coder", 1, asked)
    [view] = fold(fx._recorded(run.envs)).runs[run.run_id].candidates
    console = Console(file=io.StringIO(), width=160)
    console.print(contract_renderable(view))
    text = console.file.getvalue()
    assert "_rmsnorm_fwd_kernel(x, w, y, rows, eps; BLOCK=block_cols, N_COLS=cols, ROWS=2)" in text
    assert "grid cdiv(rows, 2), 8 warps (row_reduction, any rows)" in text


def test_a_profiles_live_tensors_show_their_length_not_their_bytes():
    from services.core import events as ev
    from services.core.pb import events_pb2 as pb

    tensor = pb.LiveTensor(name="weight", dtype="bfloat16", shape=[1536], data=bytes(range(256)) * 12)
    module = pb.ModuleClassProfile(live_parameters=[pb.LiveParameters(instances=57, tensors=[tensor])])
    captured = pb.ProfileCaptured(observed=pb.ProfileObservation(modules=[module]))
    env = ev.make_envelope("20261101-123000-feed01", captured, producer="profiler", time_ns=1)
    lines = payload_lines(Recorded(1, env), known=True)
    data = next(line for line in lines if line.strip().startswith("data:"))
    assert data.endswith("(4,096 characters)") and len(data) < 120  # 3,072 bytes in base64
    assert any(line.strip() == "instances: 57" for line in lines)
