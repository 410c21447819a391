"""Replay in the TUI (Textual Pilot, headless): controls, timing, and the screen equal to the live one."""

from __future__ import annotations

import random
import time

import pytest
import tui_fixtures as fx
from tui_pilot_helpers import body, offline_live_app, played, replay_app, screen_str, screen_text, settle, show_tab

from services.core.logfile import read_log, write_log
from tui.app import make_app
from tui.messages import EventsArrived
from tui.model import fold
from tui.screens.candidate import CandidateScreen
from tui.screens.event import EventScreen
from tui.screens.run import TABS, RunScreen

SIZE = (80, 24)


async def test_replay_pauses_steps_changes_speed_and_restarts():
    log = fx.rollback_log()
    app = replay_app(log)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert app.player.position == 0 and "⏸ test paused 1x 0/" in screen_text(app)[0]
        await pilot.press("n", "n")
        await settle(pilot)
        assert app.player.position == 2 and app.state.events_seen == 2
        await pilot.press("plus", "plus", "plus", "plus")
        await settle(pilot)
        assert app.player.speed_label == "instant" and app.player.paused
        await pilot.press("space")  # play at instant: the rest arrives at once
        await settle(pilot, 4)
        assert app.player.finished and app.state.events_seen == len(log)
        assert "■ test end instant" in screen_text(app)[0]
        await pilot.press("r")
        await settle(pilot, 4)
        assert app.player.finished  # still instant and playing: it ran to the end again
        assert app.state.events_seen == len(log)


async def test_replay_at_real_speed_releases_events_over_time():
    log = fx.swapped_log(with_metrics=False)[:3]  # recorded gaps: 6.4 s (plays as 2 s at 1x), 0.2 s
    app = replay_app(log, paused=False, speed=2.0)
    released: list[float] = []  # when each release happened (a loaded machine only makes them later)
    release = app.release
    app.release = lambda n: (released.append(time.monotonic()), release(n))[1]
    async with app.run_test(size=SIZE) as pilot:
        for _ in range(100):
            if app.player.finished:
                break
            await pilot.pause(0.05)
        assert app.player.finished and app.state.events_seen == len(log)
    # the first at once, the next after the recorded 6.4 s capped at 2 s and played at 2x, the last 0.1 s later
    assert len(released) == 3 and released[1] - released[0] >= 0.95, released


async def test_rollback_and_swap_are_marked_on_the_serving_timeline():
    app = replay_app(fx.rollback_log())
    async with app.run_test(size=SIZE) as pilot:
        await played(pilot)
        await pilot.press("3")
        await settle(pilot)
        shown = screen_str(app)
        assert "▲" in shown and "▼" in shown and "rollback swap-8e20" in shown


async def test_replay_shows_at_every_point_what_the_live_screen_showed():
    """Live gets the events in arbitrary batches through its message path; replay steps one by one.

    The state is compared after every event; the screen (without the status line and footer, which
    say "live" or "replay" by design) at ten points, each showing a different tab in turn.
    """
    log = fx.swapped_log()
    cuts = [0, 1, 4, 9, 12, 20, 33, 35, 41, len(log)]
    rng = random.Random(7)
    live_states, live_screens = [], []
    live = offline_live_app()
    async with live.run_test(size=SIZE) as pilot:
        live.open_run(fx.SWAPPED_RUN)
        fed = 0
        for i, cut in enumerate(cuts):
            while fed < cut:
                n = min(rng.randint(1, 6), cut - fed)
                live.post_message(EventsArrived(list(log[fed : fed + n])))
                fed += n
            await settle(pilot)
            live_states.append(live.state)
            await show_tab(pilot, TABS[i % len(TABS)])
            live_screens.append(body(live))
    replayed = replay_app(log)
    async with replayed.run_test(size=SIZE) as pilot:
        for i, (cut, state, screen) in enumerate(zip(cuts, live_states, live_screens, strict=True)):
            while replayed.player.position < cut:
                replayed.action_step()  # what "n" does (the key itself is pressed in other tests)
                assert replayed.state == fold(log[: replayed.player.position])
            assert replayed.state == state
            await show_tab(pilot, TABS[i % len(TABS)])
            assert fx.SWAPPED_RUN in screen[0]  # the run's own screen, not an empty one
            assert body(replayed) == screen, f"{TABS[i % len(TABS)]} after {cut} events"


def _logs_to_render():
    built = [("built", fx.all_runs_log)]  # a swapped run, a rolled-back one, one with an unknown event
    files = [(f"data/{p.name}", lambda p=p: read_log(p)) for p in fx.data_files()]
    return built + files


@pytest.mark.parametrize("name,build", _logs_to_render(), ids=[n for n, _ in _logs_to_render()])
async def test_every_screen_of_every_log_renders(name, build, tmp_path):
    """Through an exported file, as `yantra tui --replay FILE` reads it: every tab of every run, a candidate
    in full and an event's payload."""
    path = tmp_path / "log.jsonl"
    write_log(path, build())
    app = make_app(path)
    app.animation_level = "none"
    async with app.run_test(size=(100, 30)) as pilot:
        await played(pilot)
        for run_id in app.state.order:
            if isinstance(app.screen, RunScreen):
                app.pop_screen()
            app.open_run(run_id)
            await settle(pilot)
            for tab in TABS:
                await show_tab(pilot, tab)
                assert len(screen_text(app)) == 30 and run_id in screen_text(app)[1]
            await pilot.press("enter")  # the last event's payload
            await settle(pilot)
            assert isinstance(app.screen, EventScreen)
            await pilot.press("escape")
            await show_tab(pilot, "candidates")
            if app.state.runs[run_id].candidates:
                await pilot.press("enter", "3")
                await settle(pilot)
                assert isinstance(app.screen, CandidateScreen) and "reward" in screen_str(app)
                await pilot.press("escape")
                await settle(pilot)
