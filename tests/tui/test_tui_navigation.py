"""The TUI driven by keys (Textual Pilot, headless) through its screens, fed recorded event logs."""

from __future__ import annotations

from pathlib import Path

import tui_fixtures as fx
from tui_pilot_helpers import played, replay_app, screen_str, screen_text, settle

from services.core.logfile import write_log
from services.core.settings import Settings
from tui.app import main, make_app
from tui.screens.candidate import CandidateScreen
from tui.screens.event import EventScreen
from tui.screens.help import HelpScreen
from tui.screens.run import RunScreen
from tui.screens.runs import RunsScreen
from tui.widgets.event_log import EventLog

SIZE = (80, 24)


async def test_runs_screen_lists_every_run_and_opens_one():
    app = replay_app(fx.all_runs_log())
    async with app.run_test(size=SIZE) as pilot:
        await played(pilot)
        assert isinstance(app.screen, RunsScreen)
        shown = screen_str(app)
        for run_id in (fx.SWAPPED_RUN, fx.ROLLBACK_RUN, fx.UNKNOWN_RUN):
            assert run_id in shown
        assert "swapped x2.60" in shown and "rolled_back ≈" in shown and "x0.98" not in shown  # inside the noise band
        await pilot.press("down", "enter")
        await settle(pilot)
        assert isinstance(app.screen, RunScreen) and app.screen.run_id == fx.ROLLBACK_RUN
        assert "rolled back swap-8e20" in screen_str(app)
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, RunsScreen)


async def test_each_tab_of_a_run_shows_its_part():
    app = replay_app(fx.swapped_log())
    async with app.run_test(size=SIZE) as pilot:
        await played(pilot)
        assert isinstance(app.screen, RunScreen)  # a log of one run opens it directly
        expected = {
            "1": ["✔  profile", "t+21.4s", "14.2 → 36.9 tok/s"],
            "2": ["c-5e1a0b", "skill rr-7f3a", "x9.59", "x2.10", "x1.32", "72%"],
            "3": ["tokens/s now", "▲", "p50 latency"],
            "4": ["▶  Qwen2RMSNorm", "Qwen2MLP", "4,275 GB/s", "mem"],
            "5": ["RunRequested", "CandidateJudged", "RunCompleted"],
        }
        for key, parts in expected.items():
            await pilot.press(key)
            await settle(pilot)
            shown = screen_str(app)
            for part in parts:
                assert part in shown, (key, part)


async def test_candidate_detail_shows_source_contract_and_evidence():
    app = replay_app(fx.swapped_log())
    async with app.run_test(size=SIZE) as pilot:
        await played(pilot)
        await pilot.press("2", "down", "enter")
        await settle(pilot)
        assert isinstance(app.screen, CandidateScreen) and app.screen.candidate_id == "c-9d33f1"
        assert "@triton.jit" in screen_str(app)
        await pilot.press("2")
        await settle(pilot)
        assert "variance_epsilon" in screen_str(app) and "module_class" in screen_str(app)
        await pilot.press("3")
        await settle(pilot)
        shown = screen_str(app)
        assert "✘ correctness 9/12 checks" in shown and "3x1531 seed 1" in shown and "reward -1" in shown


async def test_candidate_screen_updates_when_the_verdict_lands():
    log = fx.swapped_log(with_metrics=False)
    first_proposal = next(i for i, r in enumerate(log) if r.type == "CandidateProposed")
    app = replay_app(log)
    async with app.run_test(size=SIZE) as pilot:
        app.release(first_proposal + 1)
        await settle(pilot)
        await pilot.press("2", "enter", "3")
        await settle(pilot)
        assert "judging…" in screen_str(app)
        await pilot.press("n")  # the CandidateJudged
        await settle(pilot)
        assert "⇒ reward +3" in screen_str(app) and "12/12 checks" in screen_str(app)


async def test_event_log_filters_by_type_searches_and_opens_a_payload():
    app = replay_app(fx.swapped_log())
    async with app.run_test(size=SIZE) as pilot:
        await played(pilot)
        await pilot.press("5")
        await settle(pilot)
        log = app.screen.query_one(EventLog)
        assert len(log.visible_rows()) == log.table.row_count == 14
        app.screen.query_one("#type-filter").value = "CandidateJudged"
        await settle(pilot)
        assert log.table.row_count == 3
        await pilot.press("slash", *"c-9d33f1")
        await settle(pilot)
        assert log.table.row_count == 1
        await pilot.press("escape")  # from the search box back to the table, still on this run
        await settle(pilot)
        assert isinstance(app.screen, RunScreen) and log.table.has_focus
        await pilot.press("enter")  # open the event
        await settle(pilot)
        assert isinstance(app.screen, EventScreen)
        shown = screen_str(app)
        assert "CandidateJudged" in shown and "candidate_id: c-9d33f1" in shown
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, RunScreen)
        await pilot.press("escape")  # the table has focus: escape goes back to the runs
        await settle(pilot)
        assert isinstance(app.screen, RunsScreen)


async def test_unknown_event_is_listed_and_opened_as_unknown():
    app = replay_app(fx.unknown_log())
    async with app.run_test(size=SIZE) as pilot:
        await played(pilot)
        assert "1 unknown" in screen_text(app)[0]
        await pilot.press("5")
        await settle(pilot)
        assert "? KernelAutotuned" in screen_str(app)
        app.screen.query_one("#type-filter").value = "?"
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, EventScreen)
        assert "type 'KernelAutotuned' is unknown to this TUI" in screen_str(app)


async def test_empty_log_shows_an_empty_screen_and_every_key_is_harmless():
    app = replay_app([])
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert "the log is empty" in screen_str(app)
        await pilot.press("space", "n", "plus", "minus", "r", "enter", "question_mark")
        await settle(pilot)
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, RunsScreen) and app.player.position == 0


async def test_help_screen_lists_the_keys():
    app = replay_app(fx.swapped_log())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        await settle(pilot)
        shown = screen_str(app)
        assert isinstance(app.screen, HelpScreen) and "pause / play" in shown and "search the event log" in shown
        await pilot.press("question_mark")
        await settle(pilot)
        assert not isinstance(app.screen, HelpScreen)


def test_main_reports_a_bad_replay_source_in_one_line(tmp_path, capsys):
    bad = tmp_path / "garbage.jsonl"
    bad.write_text("not json\n")
    settings = Settings(data_dir=tmp_path)
    assert main(str(bad), settings) == 2
    assert main(str(tmp_path / "missing.jsonl"), settings) == 2
    assert main("some-run", settings) == 2  # no file, and no stream to read a run from
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and all(line.startswith("yantra tui: ") for line in err)
    assert "garbage.jsonl:1: not an exported event" in err[0]
    assert "no such file, and not a run id" in err[1]
    assert "no stream to read run some-run from" in err[2]
    assert "Traceback" not in "\n".join(err)


def test_make_app_takes_a_list_or_a_file(tmp_path):
    log = fx.unknown_log()
    path = Path(tmp_path / "x.jsonl")
    write_log(path, log)
    assert make_app(log).recorded == make_app(path).recorded == tuple(log)
