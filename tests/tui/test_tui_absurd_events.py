"""Every screen renders events whose fields are absurd (NaN, infinities, the largest integers, empty and
5,000-character strings), as `yantra tui --replay FILE` reads them: a figure a producer got wrong is shown as it
is, never the end of the TUI."""

from __future__ import annotations

import math

import pytest
from absurd_events import MODES, absurd_log
from tui_pilot_helpers import played, screen_text, settle, show_tab

from services.core.logfile import write_log
from tui.app import make_app
from tui.screens.candidate import CandidateScreen
from tui.screens.event import EventScreen
from tui.screens.run import TABS, RunScreen
from tui.widgets.profile import bar
from tui.widgets.serving import sparkline


def test_bars_and_sparklines_draw_what_is_no_number_as_nothing():
    assert bar(math.nan, 4).plain == bar(0.0, 4).plain == "····"
    assert bar(math.inf, 4).plain == "████"
    assert sparkline([1.0, math.nan, 3.0, math.inf, -math.inf]) == "▁ █  "
    assert sparkline([math.nan, math.nan]) == "  "
    assert sparkline([-1e308, 0.0, 1e308]) == "▁▅█"  # their span overflows a float; the scale does not


@pytest.mark.parametrize("mode", MODES)
async def test_every_screen_renders_events_with_absurd_fields(mode, tmp_path):
    path = tmp_path / "log.jsonl"
    write_log(path, absurd_log(f"absurd-{mode}", mode, with_metrics=True))
    app = make_app(path)
    app.animation_level = "none"
    async with app.run_test(size=(100, 30)) as pilot:
        await played(pilot)
        assert app.state.order == (f"absurd-{mode}",)
        app.open_run(f"absurd-{mode}")
        await settle(pilot)
        assert isinstance(app.screen, RunScreen)
        for tab in TABS:
            await show_tab(pilot, tab)
            assert len(screen_text(app)) == 30
        await pilot.press("enter")  # the last event's payload
        await settle(pilot)
        assert isinstance(app.screen, EventScreen)
        await pilot.press("escape")
        await show_tab(pilot, "candidates")
        await pilot.press("enter", "3")
        await settle(pilot)
        assert isinstance(app.screen, CandidateScreen)
    assert app.return_code in (None, 0)
