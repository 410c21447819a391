"""One event in full: its envelope and its payload, readable."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Footer, Static

from tui.model import EventRow
from tui.payload import header_lines, payload_lines


class EventScreen(ModalScreen):
    BINDINGS = [Binding("escape,enter", "dismiss", "Close")]

    def __init__(self, row: EventRow) -> None:
        super().__init__()
        self.row = row

    def compose(self) -> ComposeResult:
        row = self.row
        title = Text(f" {row.type} ", style="bold reverse" if row.known else "bold white on red")
        title.append(f"  {row.summary}", style="")
        with VerticalScroll(id="event-box"):
            yield Static(title, classes="title")
            yield Static(Text("\n".join(header_lines(row.rec)), style="dim"))
            yield Static(Text("\n".join(payload_lines(row.rec, row.known))), classes="code")
        yield Footer()
