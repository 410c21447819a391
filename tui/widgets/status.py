"""The status line on every screen: live or replay, the link or the replay position, and counts."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from tui.figures import fmt_clock
from tui.live import Link
from tui.model import State
from tui.player import Player

_LINK_STYLE = {
    "connected": ("●", "green"),
    "connecting": ("◌", "yellow"),
    "waiting": ("◌", "yellow"),
    "lost": ("○", "bold red"),
}


def _counts(state: State) -> str:
    runs, events = len(state.order), state.events_seen
    out = f" │ {runs} run{'s' * (runs != 1)} · {events} event{'s' * (events != 1)}"
    return out + (f" · {state.unknown_events} unknown" if state.unknown_events else "")


def status_text(state: State, source: str, link: Link | None, player: Player | None, dlq: int | None = None) -> Text:
    """Replay: where it is and how fast. Live: the link first, then counts (and the dead letters, when
    the stream holds any: `yantra dlq` lists them), then the link's detail (long, so last: the counts
    stay in view at 80 columns). A replay has no dead-letter count: it is not part of a run's log."""
    out = Text(no_wrap=True, overflow="ellipsis")
    if player is not None:
        if player.finished:
            icon, style, what = "■", "cyan", "end"
        elif player.paused:
            icon, style, what = "⏸", "yellow", "paused"
        else:
            icon, style, what = "▶", "green", "playing"
        out.append(f"{icon} {source} ", style=f"bold {style}")
        out.append(f"{what} {player.speed_label} ", style=style)
        out.append(f"{player.position}/{player.total} ")
        out.append(fmt_clock(state.last_ns), style="dim")
        out.append(_counts(state), style="dim")
        return out
    icon, style = _LINK_STYLE.get(link.state if link else "connecting", ("?", "red"))
    out.append(f"{icon} live {link.state if link else 'starting'}", style=f"bold {style}")
    out.append(_counts(state), style="dim")
    if dlq:
        out.append(f" · DLQ {dlq}", style="bold red")
    if link is not None:
        out.append(f" │ {link.detail}")
        if link.attempt:
            out.append(f" (attempt {link.attempt})", style="dim")
    return out


class StatusBar(Static):
    """Redrawn whenever the app's state, link or replay position changes."""

    def on_mount(self) -> None:
        for attr in ("state", "link", "player", "dlq"):
            self.watch(self.app, attr, self._changed, init=False)
        self._changed()

    def _changed(self, *_args) -> None:
        app = self.app
        self.update(status_text(app.state, app.source_label, app.link, app.player, app.dlq))
