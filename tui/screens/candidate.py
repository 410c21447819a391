"""One candidate: its Triton source, its contract, and the judge's evidence; updates when the verdict lands."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import ScrollableContainer
from textual.screen import Screen
from textual.widgets import Footer, Static, TabbedContent, TabPane

from tui.model import CandidateView, RunView, State
from tui.widgets.candidate_detail import contract_renderable, evidence_renderable, source_renderable, title_text
from tui.widgets.status import StatusBar

TABS = ("source", "contract", "evidence")
_TAB_GROUP = Binding.Group("tabs", compact=True)


class CandidateScreen(Screen):
    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        *(Binding(str(i + 1), f"tab('{name}')", name, group=_TAB_GROUP) for i, name in enumerate(TABS)),
    ]

    def __init__(self, run_id: str, candidate_id: str) -> None:
        super().__init__()
        self.run_id = run_id
        self.candidate_id = candidate_id
        self._shown: CandidateView | None = None

    def compose(self) -> ComposeResult:
        yield StatusBar(id="status")
        yield Static(id="candidate-title")
        with TabbedContent(initial="source"):
            for name in TABS:
                with TabPane(name.capitalize(), id=name), ScrollableContainer(classes="detail"):
                    yield Static(id=f"{name}-body", classes="code")
        yield Footer()

    def on_mount(self) -> None:
        self.watch(self.app, "state", self._show)

    def _show(self, state: State) -> None:
        run = state.runs.get(self.run_id) or RunView(self.run_id)
        c = next((c for c in run.candidates if c.candidate_id == self.candidate_id), None)
        c = c or CandidateView(self.candidate_id)
        if c is self._shown:
            return
        self._shown = c
        self.query_one("#candidate-title", Static).update(title_text(c, run))
        self.query_one("#source-body", Static).update(source_renderable(c))
        self.query_one("#contract-body", Static).update(contract_renderable(c))
        self.query_one("#evidence-body", Static).update(evidence_renderable(c, run))

    def action_tab(self, name: str) -> None:
        self.query_one(TabbedContent).active = name
