"""SVG snapshots of every screen at 80x24 (and one larger), fed recorded logs.

The snapshots live in __snapshots__/test_tui_snapshots/. After an intended change to the look,
review and accept them with `pytest tests/tui/test_tui_snapshots.py --snapshot-update`.
"""

from __future__ import annotations

import pytest
import tui_fixtures as fx
from tui_pilot_helpers import replay_app

from services.core.events import Recorded
from services.core.logfile import read_log

# the snap_compare fixture (dev extra: pytest-textual-snapshot==1.1.0, which pins syrupy 4.8 and pytest < 9)
pytest.importorskip("pytest_textual_snapshot", reason="pytest-textual-snapshot is not installed")


def _released(n: int | None = None):
    """A run_before that releases the first `n` events of the replay (all when None)."""

    async def run_before(pilot) -> None:
        app = pilot.app
        app.release(app.player.total if n is None else n)
        await pilot.pause()

    return run_before


def _snap(snap_compare, log: list[Recorded], press=(), n: int | None = None, size=(80, 24)) -> None:
    assert snap_compare(replay_app(log), press=press, run_before=_released(n), terminal_size=size)


def test_runs(snap_compare):
    _snap(snap_compare, fx.all_runs_log())


def test_empty_log(snap_compare):
    _snap(snap_compare, [])


def test_help(snap_compare):
    _snap(snap_compare, fx.all_runs_log(), press=["question_mark"])


def test_pipeline_swapped(snap_compare):
    _snap(snap_compare, fx.swapped_log())


def test_pipeline_mid_run(snap_compare):
    """Paused after the second candidate's proposal: steps still running, the verdict pending."""
    _snap(snap_compare, fx.swapped_log(with_metrics=False), n=6)


def test_pipeline_rollback(snap_compare):
    _snap(snap_compare, fx.rollback_log())


def test_candidates(snap_compare):
    _snap(snap_compare, fx.swapped_log(), press=["2"])


def test_candidate_source(snap_compare):
    _snap(snap_compare, fx.swapped_log(), press=["2", "enter"])


def test_candidate_contract(snap_compare):
    _snap(snap_compare, fx.swapped_log(), press=["2", "enter", "2"])


def test_candidate_evidence(snap_compare):
    _snap(snap_compare, fx.swapped_log(), press=["2", "enter", "3"])


def test_rejected_candidate_evidence(snap_compare):
    _snap(snap_compare, fx.swapped_log(), press=["2", "down", "enter", "3"])


def test_serving(snap_compare):
    _snap(snap_compare, fx.swapped_log(), press=["3"])


def test_serving_rollback(snap_compare):
    _snap(snap_compare, fx.rollback_log(), press=["3"])


def test_profile(snap_compare):
    _snap(snap_compare, fx.swapped_log(), press=["4"])


def test_events(snap_compare):
    _snap(snap_compare, fx.swapped_log(), press=["5"])


def test_event_payload(snap_compare):
    _snap(snap_compare, fx.swapped_log(), press=["5", "enter"])


def test_events_with_an_unknown_type(snap_compare):
    _snap(snap_compare, fx.unknown_log(), press=["5"])


def test_unknown_event_payload(snap_compare):
    _snap(snap_compare, fx.unknown_log(), press=["5", "up", "enter"])


def test_pipeline_large_terminal(snap_compare):
    _snap(snap_compare, fx.swapped_log(), size=(120, 36))


def test_candidates_large_terminal(snap_compare):
    _snap(snap_compare, fx.swapped_log(), press=["2"], size=(120, 36))


@pytest.mark.parametrize("path", fx.data_files(), ids=lambda p: p.stem)
def test_recorded_run(snap_compare, path):
    """Each log recorded from a real run (tests/tui/data/*.jsonl); a new one needs `--snapshot-update` once."""
    _snap(snap_compare, read_log(path), size=(100, 30))
