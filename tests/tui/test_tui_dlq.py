"""The dead-letter count in the status line: live from the stream, absent from a replay."""

from __future__ import annotations

import tui_fixtures as fx
from tui_pilot_helpers import replay_app, screen_text, until

from services.core import events as ev
from services.core.settings import Settings
from tui import live
from tui.app import LiveConfig, make_app

SIZE = (80, 24)


async def test_the_live_status_line_counts_dead_letters_as_they_come(own_bus, own_nats, monkeypatch, run_id):
    monkeypatch.setattr(live, "DLQ_POLL_S", 0.3)
    app = make_app(LiveConfig(Settings(nats_url=own_nats.url)))
    app.animation_level = "none"
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.link is not None and app.link.state == "connected" and app.dlq == 0)
        assert "DLQ" not in screen_text(app)[0]  # nothing dead-lettered: nothing to say
        for k in range(3):
            await own_bus.dead_letter("judge", b"junk", "undecodable: test", ev.run_subject(run_id, "X"), seq=k + 1)
        await until(pilot, lambda: app.dlq == 3)
        await pilot.pause(0.2)
        assert screen_text(app)[0].startswith(" ● live connected │ 0 runs · 0 events · DLQ 3 │ ")


async def test_a_replay_shows_no_dead_letter_count():
    app = replay_app(fx.all_runs_log())
    async with app.run_test(size=SIZE) as pilot:
        app.release(app.player.total)
        await pilot.pause()
        assert app.dlq is None and "DLQ" not in screen_text(app)[0]
