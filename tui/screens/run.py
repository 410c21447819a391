"""One run: pipeline, candidates, serving, profile and the raw events, one tab each."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static, TabbedContent, TabPane

from tui.model import RunView, State
from tui.screens.candidate import CandidateScreen
from tui.screens.event import EventScreen
from tui.widgets.candidates import CandidatesTable
from tui.widgets.event_log import EventLog
from tui.widgets.pipeline import PipelineView
from tui.widgets.profile import ProfileTable
from tui.widgets.serving import ServingView
from tui.widgets.status import StatusBar

TABS = ("pipeline", "candidates", "serving", "profile", "events")
_TAB_GROUP = Binding.Group("tabs", compact=True)


def run_header(run: RunView) -> Text:
    out = Text(no_wrap=True, overflow="ellipsis")
    out.append(f"run {run.run_id}", style="bold")
    out.append(f"  {run.model or '?'} on {run.device}")
    return out


class RunScreen(Screen):
    BINDINGS = [
        Binding("escape", "app.pop_screen", "Runs"),
        *(Binding(str(i + 1), f"tab('{name}')", name, group=_TAB_GROUP) for i, name in enumerate(TABS)),
        Binding("slash", "search", "Search", show=False),
        Binding("t", "types", "Types", show=False),
    ]

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id

    def compose(self) -> ComposeResult:
        yield StatusBar(id="status")
        yield Static(id="run-header")
        with TabbedContent(initial="pipeline"):
            with TabPane("Pipeline", id="pipeline"), VerticalScroll():
                yield PipelineView()
            with TabPane("Candidates", id="candidates"):
                yield CandidatesTable(id="candidates-table")
                yield Static("enter: source, contract and the judge's evidence", classes="hint")
            with TabPane("Serving", id="serving"), VerticalScroll():
                yield ServingView()
            with TabPane("Profile", id="profile"), VerticalScroll():
                yield ProfileTable()
            with TabPane("Events", id="events"):
                yield EventLog()
        yield Footer()

    def on_mount(self) -> None:
        self.watch(self.app, "state", self._show)

    def _show(self, state: State) -> None:
        # a run not in the state yet (or any more, after a replay restart) shows as an empty run
        run = state.runs.get(self.run_id) or RunView(self.run_id, status="not in the log yet")
        self.query_one("#run-header", Static).update(run_header(run))
        self.query_one(PipelineView).show(run)
        self.query_one(CandidatesTable).show(run)
        self.query_one(ServingView).show(state.metrics, state.marks)
        self.query_one(ProfileTable).show(run)
        self.query_one(EventLog).show(run)

    def action_tab(self, name: str) -> None:
        self.query_one(TabbedContent).active = name
        focus = {"candidates": "#candidates-table", "events": "#event-table"}.get(name)
        if focus:
            self.query_one(focus).focus()

    def action_search(self) -> None:
        self.action_tab("events")
        self.query_one(EventLog).focus_search()

    def action_types(self) -> None:
        self.action_tab("events")
        self.query_one(EventLog).focus_types()

    def on_candidates_table_chosen(self, message: CandidatesTable.Chosen) -> None:
        self.app.push_screen(CandidateScreen(self.run_id, message.candidate_id))

    def on_event_log_chosen(self, message: EventLog.Chosen) -> None:
        self.app.push_screen(EventScreen(message.row))
