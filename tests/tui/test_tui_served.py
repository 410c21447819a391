"""The TUI shows a run's served load (schema 11): the runs table marks a run whose served figures were worse, and the
run's screen shows each level before -> after and the verdict, the rollback named, where an older run shows its
batch-1 ratio."""

from __future__ import annotations

import tui_fixtures as fx
from tui_pilot_helpers import played, replay_app, screen_str, settle

from services.core import events as ev
from services.core.events import Recorded
from services.core.pb import events_pb2 as pb
from services.profiler import served_verdict
from tui.screens.run import RunScreen

PLAN = pb.ServedLoadPlan(streams=[1, 16], min_repeats=3, max_repeats=6, target_half_width=0.10)


def _level(streams: int, rows) -> pb.ServedLevel:
    out = pb.ServedLevel(streams=streams)
    for tps, ttft, itl in rows:
        out.repeats.append(pb.ServedRepeat(tokens_per_s=tps, ttft_p99_ms=ttft, itl_p99_ms=itl, requests=8, wall_s=1))
    return out


def served_log() -> list[Recorded]:
    """The swapped run of the fixtures, its RunCompleted that of schema 11: TTFT p99 at 16 streams 60% up."""
    envs = fx.swapped_run()
    last = envs.pop()  # the batch-1 RunCompleted
    steady = [(180, 20.0, 6.0), (185, 21.0, 6.1), (178, 20.5, 5.9)]
    before = pb.ServedLoadObservation(plan=PLAN, device="cuda")
    before.levels.extend([_level(1, steady), _level(16, [(1200, 60.0, 9.0), (1210, 62.0, 9.1), (1190, 61.0, 9.0)])])
    after = pb.ServedLoadObservation(plan=PLAN, device="cuda")
    after.levels.extend([_level(1, steady), _level(16, [(1195, 98.0, 9.0), (1205, 99.0, 9.1), (1200, 97.0, 9.0)])])
    served = served_verdict.compare(before, after, ["swap-3c1f"])
    done = pb.RunCompleted(
        observed=pb.RunObservation(served_after=after, device="cuda"), tokens_per_s_before=181.0,
        tokens_per_s_after=181.0, speedup=1.0, swapped=True, outcome="rolled_back", target_class=fx.RMSNORM,
        reward=3, served=served,
    )  # fmt: skip
    envs.append(ev.make_envelope(last.run_id, done, producer="profiler", time_ns=last.time_unix_ns,
                                 causation_id=last.causation_id))  # fmt: skip
    envs += fx.rollback_run()  # a second run, so the runs table opens first
    return [Recorded(i + 1, e) for i, e in enumerate(sorted(envs, key=lambda e: e.time_unix_ns))]


async def test_the_served_figures_and_the_rollback_are_shown():
    app = replay_app(served_log())
    async with app.run_test(size=(120, 30)) as pilot:
        await played(pilot)
        shown = screen_str(app)
        assert fx.SWAPPED_RUN in shown and "rolled_back served worse" in shown, shown
        assert "x2.60" not in shown  # no batch-1 ratio for a run judged by its served load
        assert "rolled_back ≈" in shown  # the other run, of an older schema: its batch-1 ratio in the noise band
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, RunScreen)
        shown = screen_str(app)
        assert "served load worse" in shown, shown
        assert "served 1 streams: 181 -> 181 tok/s, TTFT p99 20.5 -> 20.5 ms, ITL p99 6.0 -> 6.0 ms" in shown, shown
        assert "served 16 streams: 1200 -> 1200 tok/s, TTFT p99 61.0 -> 98.0 ms (worse)" in shown, shown
        assert "rolled back swap-3c1f: TTFT p99 at 16 streams: 61.0 ± " in shown, shown
