"""Helpers for driving the TUI headless: build apps from logs, read the screen back as text."""

from __future__ import annotations

import io
import time

from rich.console import Console

from services.core.settings import Settings
from tui.app import LiveConfig, ReplayConfig, YantraApp, make_app


def screen_text(app: YantraApp) -> list[str]:
    """The screen as plain text lines, exactly as composed (what a user would read)."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), record=True, color_system=None)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return console.export_text().splitlines()


def screen_str(app: YantraApp) -> str:
    return "\n".join(screen_text(app))


def body(app: YantraApp) -> list[str]:
    """The screen without its status line and footer: what live and replay must show alike."""
    return screen_text(app)[1:-1]


def _quick(app: YantraApp) -> YantraApp:
    app.animation_level = "none"  # no tab underline slides: tests wait for nothing that is not the app's work
    return app


def replay_app(log, **kwargs) -> YantraApp:
    kwargs.setdefault("paused", True)
    return _quick(make_app(ReplayConfig(tuple(log), label="test", **kwargs)))


def _no_nats() -> str:
    raise ConnectionError("no NATS in this test")


def offline_live_app() -> YantraApp:
    """A live app whose stream never answers: events reach it only as posted EventsArrived messages."""
    return _quick(make_app(LiveConfig(Settings(), resolve_url=_no_nats)))


async def show_tab(pilot, name: str) -> None:
    """What the tab's number key does, without the key's idle-waiting (tests step through many tabs)."""
    pilot.app.screen.action_tab(name)
    await settle(pilot)


async def settle(pilot, rounds: int = 2) -> None:
    for _ in range(rounds):
        await pilot.pause()


async def played(pilot) -> None:
    """Release the whole recorded log of a (paused) replay app at once."""
    pilot.app.release(pilot.app.player.total)
    await settle(pilot)


async def until(pilot, check, timeout: float = 15.0) -> None:
    """Pause the pilot until `check()` holds; fails after `timeout` s, showing the status line."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        await pilot.pause(0.1)
    raise AssertionError(f"not within {timeout}s; status line: {screen_text(pilot.app)[0]!r}")
