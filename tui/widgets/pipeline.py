"""A run's pipeline: profile → retrieve → candidates → verdicts → swap, each with its time and reason."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from services.core.describe import decode_ratio, outside_noise
from tui.figures import fmt_duration, seconds, short_class
from tui.model import RunView, Step

STATUS_STYLE = {
    "waiting": ("·", "dim"),
    "running": ("◐", "bold yellow"),
    "done": ("✔", "bold green"),
    "failed": ("✘", "bold red"),
    "skipped": ("–", "dim"),
}
OUTCOME_STYLE = {"swapped": "bold green", "rolled_back": "bold red", "rejected": "bold red", "failed": "bold red"}


def outcome_text(run: RunView) -> Text:
    """One line: how the run ended (or where it is now)."""
    out = Text(no_wrap=True, overflow="ellipsis")
    if run.outcome:
        out.append(run.outcome, style=OUTCOME_STYLE.get(run.outcome, "bold yellow"))
        if run.target_class:
            out.append(f"  {short_class(run.target_class)}")
        if run.reward is not None:
            out.append(f"  reward {run.reward:+d}")
        if run.served:  # schema 11: judged by the served load's own intervals, shown under this line
            out.append("  served load worse" if run.served_worse else "  served load kept", style=_served_style(run))
        elif run.tokens_per_s_before:
            out.append(f"  {run.tokens_per_s_before:.1f} → {run.tokens_per_s_after:.1f} tok/s")
            device = run.profile.device if run.profile else ""
            claim = outside_noise(run.speedup, device)
            style = "bold green" if claim and run.speedup > 1 else "bold" if claim else "dim"
            out.append(f" ({decode_ratio(run.speedup, device)})", style=style)
        return out
    out.append(run.status, style="bold yellow")
    if run.target_class:
        out.append(f"  target {short_class(run.target_class)}")
    if run.tokens_per_s_before:
        out.append(f"  {run.tokens_per_s_before:.1f} tok/s before")
    return out


def _served_style(run: RunView) -> str:
    return "bold red" if run.served_worse else "green"


def served_text_lines(run: RunView) -> list[Text]:
    """The served load before -> after at each level, then the verdict (a run of schema 11; none before)."""
    lines = [Text(line, no_wrap=True, overflow="ellipsis") for line in run.served]
    if lines:
        lines[-1].stylize(_served_style(run))
    return lines


def _times(run: RunView, step: Step) -> tuple[str, str]:
    if not step.started_ns or not run.requested_ns or step.status == "skipped":
        return "", ""
    at = f"t+{fmt_duration(seconds(step.started_ns - run.requested_ns))}"
    took = fmt_duration(seconds(step.ended_ns - step.started_ns)) if step.ended_ns else "…"
    return at, took


def pipeline_renderable(run: RunView) -> Group:
    table = Table(box=None, expand=True, show_header=True, header_style="dim", pad_edge=False)
    table.add_column("", width=1, no_wrap=True)
    table.add_column("step", width=10, no_wrap=True)
    table.add_column("start", width=8, no_wrap=True, justify="right")
    table.add_column("took", width=6, no_wrap=True, justify="right")
    table.add_column("reason", ratio=1, overflow="fold")
    for step in run.steps:
        icon, style = STATUS_STYLE.get(step.status, ("?", "red"))
        at, took = _times(run, step)
        reason = Text(step.reason or step.status, style="dim" if step.status in ("waiting", "skipped") else "")
        table.add_row(Text(icon, style=style), Text(step.name, style=style), at, took, reason)
    policy = Text(f"policy {run.policy}" if run.policy else "", style="dim", no_wrap=True, overflow="ellipsis")
    return Group(outcome_text(run), *served_text_lines(run), policy, table)


class PipelineView(Static):
    """Redraws only when the run it shows changed (the fold keeps unchanged runs identical)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._run: RunView | None = None

    def show(self, run: RunView) -> None:
        if run is self._run:
            return
        self._run = run
        self.update(pipeline_renderable(run))
