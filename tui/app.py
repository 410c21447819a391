"""`yantra tui`: watch gpuyantra make a model faster, live or replayed.

The app is thin: it holds the folded state (tui/model.py) and feeds it from one of two sources,
a live JetStream tail (a worker posting EventsArrived/LinkChanged) or a recorded log released by
the replay player. Both go through `apply`, the one place the state changes, so a replay shows
exactly what the live screen showed. Screens watch `state` and draw from it.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from textual import work
from textual.app import App
from textual.binding import Binding
from textual.reactive import var
from textual.screen import Screen

from services.core.events import METRIC_EVENT_NAMES, Recorded
from services.core.settings import Settings
from services.core.stack import resolve_nats_url
from tui.live import Link, LiveTail
from tui.messages import DlqChanged, EventsArrived, LinkChanged
from tui.model import State, fold
from tui.player import INSTANT, Player, player_for
from tui.screens.help import HelpScreen
from tui.screens.run import RunScreen
from tui.screens.runs import RunsScreen
from tui.sources import ReplayError, load_file, resolve_replay

REPLAY_ACTIONS = {"pause", "step", "faster", "slower", "restart"}
_SPEED = Binding.Group("speed", compact=True)


@dataclass(frozen=True)
class ReplayConfig:
    """Replay a recorded log: a list of events, or an exported file (`yantra replay RUN --export FILE`)."""

    log: Sequence[Recorded] | Path
    label: str = ""
    speed: float = 1.0  # one of player.SPEEDS (nearest is taken); player.INSTANT releases everything at once
    paused: bool = False
    open_run: str | None = None  # None: open the run directly when the log holds exactly one


@dataclass(frozen=True)
class LiveConfig:
    """Tail the streams of a running stack."""

    settings: Settings
    resolve_url: Callable[[], str] | None = None  # default: NATS_URL, else the running `yantra up`


class YantraApp(App[int]):
    CSS_PATH = "app.tcss"
    TITLE = "gpuyantra"
    ENABLE_COMMAND_PALETTE = False  # every action has a key; the footer has no room to spare at 80 columns
    BINDINGS = [
        Binding("question_mark", "help", "Help"),
        Binding("q", "quit", "Quit"),
        Binding("space", "pause", "Play/pause"),
        Binding("n", "step", "Step"),
        Binding("plus", "faster", "faster", key_display="+", group=_SPEED),
        Binding("minus", "slower", "slower", key_display="-", group=_SPEED),
        Binding("r", "restart", "Restart", show=False),
    ]

    state: var[State] = var(State, always_update=True)
    link: var[Link | None] = var(None)
    dlq: var[int | None] = var(None)  # dead letters in the stream; None: not known (replay, not read yet)
    player: var[Player | None] = var(None)

    def __init__(self, config: ReplayConfig | LiveConfig) -> None:
        super().__init__()
        self.config = config
        self.recorded: tuple[Recorded, ...] = ()
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        if isinstance(config, ReplayConfig):
            log = config.log
            self.recorded = tuple(load_file(log) if isinstance(log, Path) else log)
            label = config.label or (log.name if isinstance(log, Path) else "log")
            self.source_label = label
            self.set_reactive(YantraApp.player, player_for(len(self.recorded), config.speed, config.paused))
        else:
            self.source_label = "live"

    # ------------------------------------------------------------------ the one place state changes

    def apply(self, records: Sequence[Recorded]) -> None:
        self.state = fold(records, self.state)

    def on_events_arrived(self, message: EventsArrived) -> None:
        self.apply(message.records)

    def on_link_changed(self, message: LinkChanged) -> None:
        self.link = message.link

    def on_dlq_changed(self, message: DlqChanged) -> None:
        self.dlq = message.count

    # ------------------------------------------------------------------ screens

    def get_default_screen(self) -> Screen:
        return RunsScreen()

    def on_mount(self) -> None:
        if isinstance(self.config, LiveConfig):
            self.tail_live()
            return
        run_id = self.config.open_run or self._single_run()
        if run_id:
            self.open_run(run_id)
        self.drive_replay()

    def on_unmount(self) -> None:
        self._stop.set()

    def _single_run(self) -> str | None:
        runs = {r.env.run_id for r in self.recorded if r.type not in METRIC_EVENT_NAMES}
        return runs.pop() if len(runs) == 1 else None

    def open_run(self, run_id: str) -> None:
        self.push_screen(RunScreen(run_id))

    def empty_hint(self) -> str:
        if self.player is None:
            return "no runs yet: `yantra optimize` starts one (this screen fills in as events arrive)"
        if not self.player.total:
            return "the log is empty: nothing to replay"
        return "no run events released yet: space plays, n steps"

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    # ------------------------------------------------------------------ live

    @work(exclusive=True, group="live")
    async def tail_live(self) -> None:
        config = self.config
        assert isinstance(config, LiveConfig)
        resolve = config.resolve_url or (lambda: resolve_nats_url(config.settings))
        tail = LiveTail(
            resolve,
            on_events=lambda batch: self.post_message(EventsArrived(batch)),
            on_link=lambda link: self.post_message(LinkChanged(link)),
            on_dlq=lambda count: self.post_message(DlqChanged(count)),
            auth=config.settings.nats_auth(),
            tls=config.settings.nats_tls(),
        )
        await tail.run(self._stop)

    # ------------------------------------------------------------------ replay

    def release(self, n: int) -> None:
        """Hand the next `n` recorded events to the fold, as if they had just arrived."""
        player = self.player
        if player is None or n <= 0:
            return
        batch = self.recorded[player.position : player.position + n]
        self.player = player.advanced(len(batch))
        self.apply(batch)

    @work(exclusive=True, group="replay")
    async def drive_replay(self) -> None:
        while not self._stop.is_set():
            player = self.player
            if player is None:
                return
            if player.finished or player.paused:
                await self._wake.wait()
                self._wake.clear()
                continue
            if player.speed == INSTANT:
                self.release(player.total - player.position)
                continue
            delay = player.delay_before_next(self.recorded)
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), delay)
            except TimeoutError:
                self.release(1)
            # woken early: a control changed; go round and decide afresh

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in REPLAY_ACTIONS and self.player is None:
            return False  # live: no replay controls in the footer
        return True

    def _control(self, player: Player) -> None:
        self.player = player
        self._wake.set()

    def action_pause(self) -> None:
        if self.player:
            self._control(self.player.toggled())

    def action_step(self) -> None:
        if self.player:
            self.player = replace(self.player, paused=True)
            self.release(1)
            self._wake.set()

    def action_faster(self) -> None:
        if self.player:
            self._control(self.player.faster())

    def action_slower(self) -> None:
        if self.player:
            self._control(self.player.slower())

    def action_restart(self) -> None:
        if self.player:
            self.state = State()
            self._control(self.player.restarted())


def make_app(config: ReplayConfig | LiveConfig | Sequence[Recorded] | Path) -> YantraApp:
    """The app for a config; a bare log or file means: replay it, paused at the start."""
    if isinstance(config, Path):
        config = ReplayConfig(config, paused=True)
    elif not isinstance(config, ReplayConfig | LiveConfig):
        config = ReplayConfig(tuple(config), paused=True)
    return YantraApp(config)


def _one_line(exc: BaseException) -> str:
    """The error's message on one line, with its cause where the message ends without one
    (a connection that timed out has an empty message)."""
    text = " ".join(str(exc).split())
    cause = exc.__cause__
    if cause is not None and text.endswith(":"):
        detail = " ".join(str(cause).split())
        if not detail:
            detail = "timed out" if isinstance(cause, TimeoutError) else type(cause).__name__
        text = f"{text} {detail}"
    return text


def main(replay: str | None, settings: Settings) -> int:
    """`yantra tui [--replay RUN|FILE]`: 0 when the user quits, 2 when the replay source cannot be read."""
    if replay is None:
        config: ReplayConfig | LiveConfig = LiveConfig(settings)
    else:
        # nats-py logs each failed connection attempt with its traceback (its default error callback):
        # the one line below says it all.
        nats_log = logging.getLogger("nats")
        level = nats_log.level
        nats_log.setLevel(logging.CRITICAL)
        try:
            log, label = resolve_replay(
                replay, lambda: resolve_nats_url(settings), settings.nats_auth(), settings.nats_tls()
            )
        except ReplayError as exc:
            print(f"yantra tui: {_one_line(exc)}", file=sys.stderr)
            return 2
        finally:
            nats_log.setLevel(level)
        config = ReplayConfig(log, label)
    make_app(config).run()
    return 0
