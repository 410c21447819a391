"""Every key, on one screen."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Footer, Static

KEYS = (
    ("anywhere", "?", "this help"),
    ("", "q", "quit"),
    ("", "escape", "back to the previous screen"),
    ("runs", "↑ ↓ enter", "pick a run and open it"),
    ("a run", "1 … 5", "pipeline, candidates, serving, profile, events"),
    ("", "enter", "on a candidate: its source, contract and evidence; on an event: its payload"),
    ("", "/", "search the event log"),
    ("", "t", "filter the event log by type"),
    ("a candidate", "1 … 3", "source, contract, evidence"),
    ("replay", "space", "pause / play"),
    ("", "n", "step: release the next event (pauses)"),
    ("", "+ -", "speed: 0.5x, 1x, 2x, 5x, 10x, instant"),
    ("", "r", "restart from the first event"),
)
NOTES = (
    "Live: events are tailed from JetStream (NATS_URL, or the stack of a running `yantra up`); a lost"
    " connection shows in the status line and is retried.\n"
    "Replay: `yantra tui --replay RUN|FILE` feeds the recorded events through the same fold as live, so the"
    " screen after N events is what the live screen showed after those N events. Gaps over 2 s are shortened."
)


def keys_table() -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False, expand=True)
    table.add_column("where", style="dim", no_wrap=True)
    table.add_column("key", style="bold cyan", no_wrap=True)
    table.add_column("does", ratio=1)
    for row in KEYS:
        table.add_row(*row)
    return table


class HelpScreen(ModalScreen):
    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static(Text("gpuyantra tui — keys", style="bold"), classes="title")
            yield Static(keys_table())
            yield Static(Text(NOTES, style="dim"), classes="notes")
        yield Footer()
