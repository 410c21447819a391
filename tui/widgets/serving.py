"""Serving: tokens/s and latency from ServerMetrics as sparklines, with each swap and rollback marked.

The points fill the width (runs of points averaged when there are more points than columns,
points repeated when fewer), so the newest point is always at the right edge, and a swap's mark
sits above the first point measured after it: the step up in tokens/s lands right under its ▲.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

from rich.text import Text
from textual.widget import Widget

from tui.figures import fmt_clock
from tui.model import Mark, MetricPoint

BARS = "▁▂▃▄▅▆▇█"
MARK_STYLE = {"swap": ("▲", "bold green"), "rollback": ("▼", "bold red")}


def columns(values: Sequence[float], width: int) -> list[float]:
    """`values` spread over exactly `width` columns: runs of points averaged, or points repeated when few."""
    n = len(values)
    if not n:
        return []
    out = []
    for col in range(width):
        start = col * n // width
        chunk = values[start : max((col + 1) * n // width, start + 1)]
        out.append(sum(chunk) / len(chunk))
    return out


def column_of(index: int, n: int, width: int) -> int:
    """The first column that shows point `index` of `n` (index n: just after the newest point)."""
    return min(-(-index * width // n), width - 1) if n else 0


def sparkline(values: Sequence[float]) -> str:
    """One bar a value, scaled between the least and the greatest; a value that is no number (NaN, inf: the
    metrics are whatever a server recorded) is a gap, so it neither takes the scale nor the screen down."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return " " * len(values)
    # halved so that the span of two values far apart (-1e308, 1e308) does not overflow to inf
    lo, hi = min(finite) / 2, max(finite) / 2

    def cell(v: float) -> str:
        if not math.isfinite(v):
            return " "
        if hi - lo <= 1e-12:
            return BARS[3]
        return BARS[min(int((v / 2 - lo) / (hi - lo) * len(BARS)), len(BARS) - 1)]

    return "".join(cell(v) for v in values)


def mark_row(times: Sequence[int], marks: Sequence[Mark], width: int) -> Text:
    """A line with each mark above the first point measured at or after it."""
    cells: list[tuple[str, str]] = [(" ", "")] * width
    for m in marks:
        if not times or m.time_ns < times[0]:
            continue  # before the timeline's window
        col = column_of(bisect.bisect_left(times, m.time_ns), len(times), width)
        cells[col] = MARK_STYLE.get(m.kind, ("?", "red"))
    out = Text(no_wrap=True)
    for ch, style in cells:
        out.append(ch, style=style)
    return out


def _series(label: str, unit: str, values: list[float], width: int, style: str) -> list[Text]:
    head = Text(no_wrap=True, overflow="ellipsis")
    head.append(f"{label} ", style="bold")
    head.append(f"now {values[-1]:.1f}{unit}", style=style)
    head.append(f"  min {min(values):.1f}  max {max(values):.1f}", style="dim")
    return [head, Text(sparkline(columns(values, width)), style=style, no_wrap=True)]


def serving_lines(metrics: Sequence[MetricPoint], marks: Sequence[Mark], width: int, compact: bool) -> list[Text]:
    if not metrics:
        return [
            Text("no ServerMetrics yet", style="bold"),
            Text("the server publishes them on yantra.metrics.> while it serves", style="dim"),
        ]
    width = max(width, 8)
    times = [p.time_ns for p in metrics]
    span = (times[-1] - times[0]) / 1e9
    title = Text(no_wrap=True, overflow="ellipsis")
    title.append("serving ", style="bold")
    title.append(f"{metrics[-1].server_id}  last {span:.0f}s, {len(metrics)} points  ", style="dim")
    title.append("▲ swap ", style="green")
    title.append("▼ rollback", style="red")
    marks_line = mark_row(times, marks, width)
    lines = [title, marks_line]
    lines += _series("tokens/s", "", [p.tokens_per_s for p in metrics], width, "green")
    if compact:
        return lines
    lines += [marks_line]
    lines += _series("p50 latency", " ms", [p.p50_ms for p in metrics], width, "yellow")
    last = metrics[-1]
    now = f"p95 now {last.p95_ms:.1f} ms · active swaps {last.active_swaps}"
    if last.active_requests or last.batch_requests or last.waiting_requests:
        now += f" · {last.active_requests} requests, {last.batch_requests} per step, {last.waiting_requests} waiting"
    lines.append(Text(now, style="dim"))
    shown = [m for m in marks if m.time_ns >= times[0]]
    for m in shown[-4:]:
        ch, style = MARK_STYLE.get(m.kind, ("?", "red"))
        line = Text(no_wrap=True, overflow="ellipsis")
        line.append(f"{ch} ", style=style)
        line.append(f"{fmt_clock(m.time_ns)} {m.kind} {m.label} · run {m.run_id}")
        if m.lineage:
            line.append(f" · {m.lineage}", style="dim")
        line.truncate(width, overflow="ellipsis")  # the joined lines wrap otherwise, past the height asked for
        lines.append(line)
    return lines


class ServingView(Widget):
    """Draws to its own width, so it is a Widget with render(), not a Static of fixed text."""

    DEFAULT_CSS = "ServingView { height: auto; }"

    def __init__(self, compact: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.compact = compact
        self._metrics: Sequence[MetricPoint] = ()
        self._marks: Sequence[Mark] = ()

    def show(self, metrics: Sequence[MetricPoint], marks: Sequence[Mark]) -> None:
        if metrics is self._metrics and marks is self._marks:
            return
        self._metrics, self._marks = metrics, marks
        self.refresh(layout=True)

    def get_content_height(self, container, viewport, width: int) -> int:
        return len(serving_lines(self._metrics, self._marks, width, self.compact))

    def render(self) -> Text:
        return Text("\n").join(serving_lines(self._metrics, self._marks, self.content_size.width, self.compact))
