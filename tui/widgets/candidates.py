"""The candidates of a run: where each came from, the judge's verdict, and its speed against the baselines."""

from __future__ import annotations

from rich.text import Text
from textual.message import Message
from textual.widgets import DataTable

from tui.figures import fmt_err, fmt_pct, fmt_ratio
from tui.model import CandidateView, RunView

# speed-ups are "x times faster than" each baseline; %BW is the share of the copy ceiling (figures.py)
COLUMNS = ("candidate", "origin", "rwd", "checks", "max err", "eager", "compile", "native", "%BW", "verdict")
REWARD_STYLE = {-1: "bold red", 1: "yellow", 2: "green", 3: "bold green"}


def origin_label(c: CandidateView) -> str:
    if c.origin == "skill":
        return f"skill {c.origin_detail.removeprefix('skill-')}".strip()
    if c.origin == "template":
        # "row_reduction_onepass w4 r1" -> "tpl w4 r1": the template family is the target's, shown elsewhere
        return "tpl " + " ".join(c.origin_detail.split()[1:]) if c.origin_detail else "template"
    return c.origin or "?"


def _verdict(c: CandidateView) -> Text:
    if c.swap:
        style = "bold green" if c.swap == "committed" else "bold red"
        return Text(f"swap {c.swap}", style=style)
    if c.reward is None:
        return Text("judging…", style="yellow")
    if c.rejection:
        return Text(c.rejection, style="red")
    if not c.timed:
        return Text(f"{c.verdict}, untimed", style="dim")
    return Text(c.verdict)


def candidate_cells(c: CandidateView) -> tuple:
    reward = Text("-" if c.reward is None else f"{c.reward:+d}", style=REWARD_STYLE.get(c.reward, ""))
    return (
        c.candidate_id,
        origin_label(c),
        reward,
        c.checks or "-",
        "-" if c.max_abs_err is None else fmt_err(c.max_abs_err),
        fmt_ratio(c.vs_eager),
        fmt_ratio(c.vs_compile),
        fmt_ratio(c.vs_native),
        fmt_pct(c.copy_fraction),
        _verdict(c),
    )


class CandidatesTable(DataTable):
    """One row per candidate; Enter opens its source, contract and evidence."""

    class Chosen(Message):
        def __init__(self, candidate_id: str) -> None:
            super().__init__()
            self.candidate_id = candidate_id

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self._shown: dict[str, CandidateView] = {}

    def show(self, run: RunView) -> None:
        if not self.columns:
            for name in COLUMNS:
                self.add_column(name, key=name)
        if len(run.candidates) < len(self._shown):  # the replay restarted
            self.clear()
            self._shown = {}
        for c in run.candidates:
            old = self._shown.get(c.candidate_id)
            if old is c:
                continue
            cells = candidate_cells(c)
            if old is None:
                self.add_row(*cells, key=c.candidate_id)
            else:
                for name, value in zip(COLUMNS, cells, strict=True):
                    self.update_cell(c.candidate_id, name, value, update_width=True)
            self._shown[c.candidate_id] = c

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if event.row_key.value is not None:
            self.post_message(self.Chosen(event.row_key.value))
