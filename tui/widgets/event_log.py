"""The raw event stream of a run: filterable by type, searchable; Enter shows an event's payload."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import DataTable, Input, Select

from services.core.events import RUN_EVENT_NAMES
from tui.figures import fmt_clock
from tui.model import EventRow, RunView

ALL = "*"
UNKNOWN = "?"
TYPE_OPTIONS = [("all types", ALL), *((name, name) for name in RUN_EVENT_NAMES), ("unknown types", UNKNOWN)]
COLUMNS = ("seq", "time", "from", "type", "summary")


def matches(row: EventRow, type_filter: str, query: str) -> bool:
    if type_filter == UNKNOWN and row.known:
        return False
    if type_filter not in (ALL, UNKNOWN) and row.type != type_filter:
        return False
    if not query:
        return True
    haystack = f"{row.type} {row.producer} {row.summary} {row.rec.env.event_id}".lower()
    return all(word in haystack for word in query.lower().split())


def row_cells(row: EventRow) -> tuple:
    kind = Text(row.type) if row.known else Text(f"? {row.type}", style="bold red")
    return (str(row.seq), fmt_clock(row.time_ns), row.producer, kind, row.summary)


class EventLog(Vertical):
    """Rows are appended as events arrive; a changed filter rebuilds them."""

    # escape in the search box returns to the table; from the table it goes on to the screen (back)
    BINDINGS = [Binding("escape", "leave_filters", "Table", show=False)]

    class Chosen(Message):
        def __init__(self, row: EventRow) -> None:
            super().__init__()
            self.row = row

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._events: tuple[EventRow, ...] = ()
        self._shown_upto = 0  # events[:_shown_upto] have been considered for the table
        self._type = ALL
        self._query = ""

    def compose(self) -> ComposeResult:
        with Horizontal(classes="filters"):
            yield Select(TYPE_OPTIONS, value=ALL, allow_blank=False, compact=True, id="type-filter")
            yield Input(placeholder="search (/)", compact=True, id="search")
        yield DataTable(cursor_type="row", zebra_stripes=True, id="event-table")

    @property
    def table(self) -> DataTable:
        return self.query_one("#event-table", DataTable)

    def show(self, run: RunView) -> None:
        if run.events is self._events:
            return
        restarted = len(run.events) < self._shown_upto
        self._events = run.events
        self._rebuild() if restarted else self._append()

    def visible_rows(self) -> list[EventRow]:
        return [r for r in self._events if matches(r, self._type, self._query)]

    def _append(self) -> None:
        table = self.table
        if not table.columns:
            for name in COLUMNS:
                table.add_column(name, key=name)
        at_end = table.row_count == 0 or table.cursor_row >= table.row_count - 1
        for row in self._events[self._shown_upto :]:
            if matches(row, self._type, self._query):
                table.add_row(*row_cells(row), key=str(row.index))
        self._shown_upto = len(self._events)
        if at_end and table.row_count:
            table.move_cursor(row=table.row_count - 1)  # follow the tail unless the reader moved away

    def _rebuild(self) -> None:
        self.table.clear()
        self._shown_upto = 0
        self._append()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "leave_filters":
            return self.query_one("#search", Input).has_focus or self.query_one("#type-filter", Select).has_focus
        return True

    def action_leave_filters(self) -> None:
        self.table.focus()

    def focus_search(self) -> None:
        self.query_one("#search", Input).focus()

    def focus_types(self) -> None:
        self.query_one("#type-filter", Select).focus()

    def on_select_changed(self, event: Select.Changed) -> None:
        event.stop()
        self._type = str(event.value)
        self._rebuild()

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self._query = event.value.strip()
        self._rebuild()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.table.focus()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        index = int(event.row_key.value or -1)
        row = next((r for r in self._events if r.index == index), None)
        if row is not None:
            self.post_message(self.Chosen(row))
