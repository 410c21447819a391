"""The profile of a run: targets ranked by their share of the step, and where each sits on the roofline."""

from __future__ import annotations

import math

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from tui.figures import fmt_us, short_class
from tui.model import ProfileView, RunView

BAR_WIDTH = 10


def bar(fraction: float, width: int = BAR_WIDTH, style: str = "cyan") -> Text:
    """A horizontal bar of `fraction` (0..1) in eighths of a cell."""
    # NaN passes through min and max unchanged, and an event's figures are whatever it recorded
    fraction = min(max(fraction, 0.0), 1.0) if not math.isnan(fraction) else 0.0
    eighths = round(fraction * width * 8)
    full, part = divmod(eighths, 8)
    text = "█" * full + ("▏▎▍▌▋▊▉"[part - 1] if part else "")
    return Text(text.ljust(width, "·"), style=style, no_wrap=True)


def hardware_line(p: ProfileView) -> Text:
    out = Text(no_wrap=True, overflow="ellipsis")
    out.append(p.device_name or p.device, style="bold")
    out.append(" calibrated" if p.calibrated else " (table figures)", style="dim")
    if p.peak_bytes_per_s:
        out.append(f" · copy {p.peak_bytes_per_s / 1e9:,.0f} GB/s")
    out.append(f" · {p.dtype} · captured {fmt_us(p.captured_time_us)} ({p.time_source or '?'})")
    out.append(f" · {p.tokens_per_s:.1f} tok/s")
    return out


def profile_renderable(run: RunView) -> Group | Text:
    if run.profile is None:
        return Text("no profile yet: the profiler answers RunRequested with ProfileCaptured", style="dim")
    table = Table(box=None, expand=True, header_style="dim", pad_edge=False)
    table.add_column("", width=1, no_wrap=True)
    table.add_column("target", ratio=1, no_wrap=True, overflow="ellipsis", min_width=12)
    table.add_column("share of step", width=13, no_wrap=True)
    table.add_column("time", width=8, justify="right", no_wrap=True)
    table.add_column("floor", width=8, justify="right", no_wrap=True)
    table.add_column("roofline", width=22, no_wrap=True)
    for t in run.targets:
        share = bar(t.time_share, 8)
        share.append(f" {100 * t.time_share:3.0f}%", style="bold" if t.chosen else "")
        roof = bar(t.achieved_fraction, 6, "green" if t.achieved_fraction > 0.5 else "yellow")
        bound = "mem" if t.memory_bound else "cmp"
        roof.append(f"{100 * t.achieved_fraction:4.0f}% {bound} {t.arithmetic_intensity:.2g}F/B")
        name = Text(short_class(t.class_path), style="bold" if t.chosen else ("" if t.supported else "dim"))
        table.add_row(
            Text("▶" if t.chosen else " ", style="bold green"), name, share, fmt_us(t.measured_us), fmt_us(t.floor_us),
            roof,
        )  # fmt: skip
    chosen = next((t for t in run.targets if t.chosen), None)
    why = Text(
        "roofline: achieved bytes/s as a share of the copy ceiling; mem/cmp: memory- or compute-bound;"
        " F/B: FLOP per byte moved",
        style="dim",
    )
    notes = Text(f"{short_class(chosen.class_path)}: {chosen.note}" if chosen and chosen.note else "", style="dim")
    return Group(hardware_line(run.profile), Text(""), table, Text(""), notes, why)


class ProfileTable(Static):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._run: RunView | None = None

    def show(self, run: RunView) -> None:
        if self._run is not None and run.profile is self._run.profile and run.targets is self._run.targets:
            return
        self._run = run
        self.update(profile_renderable(run))
