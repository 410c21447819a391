"""The first screen: every run, and the server's tokens/s with swaps marked."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer, Static

from tui.model import State
from tui.widgets.runs_table import RunsTable
from tui.widgets.serving import ServingView
from tui.widgets.status import StatusBar


class RunsScreen(Screen):
    def compose(self) -> ComposeResult:
        yield StatusBar(id="status")
        yield Static("runs — ↑↓ to pick, enter to open", id="runs-title", classes="title")
        yield RunsTable(id="runs")
        yield Static("", id="runs-empty")
        yield ServingView(compact=True, id="runs-serving")
        yield Footer()

    def on_mount(self) -> None:
        self.watch(self.app, "state", self._show)

    def _show(self, state: State) -> None:
        self.query_one(RunsTable).show(state)
        self.query_one(ServingView).show(state.metrics, state.marks)
        empty = self.query_one("#runs-empty", Static)
        empty.display = not state.order
        if not state.order:
            empty.update(self.app.empty_hint())

    def on_runs_table_chosen(self, message: RunsTable.Chosen) -> None:
        self.app.open_run(message.run_id)
