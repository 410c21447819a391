"""Every run with its model, device, state, target and outcome; Enter opens one."""

from __future__ import annotations

from rich.text import Text
from textual.message import Message
from textual.widgets import DataTable

from services.core.describe import outside_noise
from tui.figures import short_class
from tui.model import RunView, State
from tui.widgets.pipeline import OUTCOME_STYLE

# the outcome and state come right after the id: at 80 columns they are what must stay in view
COLUMNS = ("run", "outcome", "state", "target", "model", "device")


def _targets(run: RunView) -> str:
    if not run.targets:
        return "-"
    chosen = short_class(run.target_class) if run.target_class else "none"
    return f"{chosen} (of {len(run.targets)})"


def _outcome(run: RunView) -> Text:
    if not run.outcome:
        return Text("…", style="dim")
    text = Text(run.outcome, style=OUTCOME_STYLE.get(run.outcome, "yellow"))
    if run.served:  # schema 11: the served load's verdict, not a ratio against a noise band
        if run.served_worse:
            text.append(" served worse", style="red")
    elif run.tokens_per_s_before:
        device = run.profile.device if run.profile else ""
        if outside_noise(run.speedup, device):
            text.append(f" x{run.speedup:.2f}")
        else:  # inside the decode measure's noise band: no speed claim either way
            text.append(" ≈", style="dim")
    return text


def run_cells(run: RunView) -> tuple:
    state = Text(run.status, style="green" if run.status == "done" else "yellow")
    if run.unknown_events:
        state.append(f" +{run.unknown_events}?", style="red")
    return (run.run_id, _outcome(run), state, _targets(run), run.model or "-", run.device)


class RunsTable(DataTable):
    class Chosen(Message):
        def __init__(self, run_id: str) -> None:
            super().__init__()
            self.run_id = run_id

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self._shown: dict[str, RunView] = {}

    def show(self, state: State) -> None:
        if not self.columns:
            for name in COLUMNS:
                self.add_column(name, key=name)
        for run_id in state.order:
            run = state.runs[run_id]
            old = self._shown.get(run_id)
            if old is run:
                continue
            cells = run_cells(run)
            if old is None:
                self.add_row(*cells, key=run_id)
            else:
                for name, value in zip(COLUMNS, cells, strict=True):
                    self.update_cell(run_id, name, value, update_width=True)
            self._shown[run_id] = run
        if len(self._shown) > len(state.order):  # the replay restarted: start the table afresh
            self.clear()
            self._shown = {}
            self.show(state)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if event.row_key.value is not None:
            self.post_message(self.Chosen(event.row_key.value))
