"""A run's served before/after (RunCompleted.served, schema 11) in words, for the verdict lines the profiler records,
`yantra runs`, `yantra events` and the TUI: one reading, written once."""

from __future__ import annotations

import math

from services.core.pb import events_pb2 as pb

NAMES = {"throughput": "throughput", "ttft_p99": "TTFT p99", "itl_p99": "ITL p99"}
UNITS = {"throughput": "tok/s", "ttft_p99": "ms", "itl_p99": "ms"}


def interval(i: pb.ServedInterval, unit: str = "") -> str:
    """'412.0 ± 12.3 tok/s'; '412.0 ± ? tok/s' with one repeat (no spread measured); '(unconverged)' when the
    half-width never reached the plan's target."""
    half = "?" if math.isinf(i.half_width) else f"{i.half_width:.1f}"
    text = f"{i.mean:.1f} ± {half}" + (f" {unit}" if unit else "")
    return text if i.converged else text + " (unconverged)"


def figure_line(f: pb.ServedFigure, streams: int) -> str:
    """'TTFT p99 at 16 streams: 55.0 ± 3.0 ms before, 82.0 ± 5.0 ms after'."""
    unit = UNITS.get(f.name, "")
    name = NAMES.get(f.name, f.name)
    return f"{name} at {streams} streams: {interval(f.before, unit)} before, {interval(f.after, unit)} after"


def _short(i: pb.ServedInterval) -> str:
    return f"{i.mean:.0f}" if i.mean >= 100 else f"{i.mean:.1f}"


def level_brief(level: pb.ServedLevelComparison) -> str:
    """'16 streams: 918 -> 1232 tok/s, TTFT p99 612 -> 862 ms (worse), ITL p99 81.0 -> 60.0 ms': before -> after means,
    a figure worse beyond its interval marked."""
    parts = []
    for f in level.figures:
        mark = " (worse)" if f.worse else ""
        label = "" if f.name == "throughput" else NAMES.get(f.name, f.name) + " "
        parts.append(f"{label}{_short(f.before)} -> {_short(f.after)} {UNITS.get(f.name, '')}{mark}")
    return f"{level.streams} streams: " + ", ".join(parts)


def brief(served: pb.ServedComparison) -> str:
    """The whole comparison on one line: each level's figures, then the verdict."""
    levels = "; ".join(level_brief(lv) for lv in served.levels)
    return f"served {levels}; {served.verdict}" if levels else f"served: {served.verdict}"


def run_lines(completed: pb.RunCompleted) -> list[str]:
    """`yantra runs`' lines under a completed run: each level before -> after, then the verdict (none for a run
    from before schema 11, whose RunCompleted holds no served figures)."""
    if not completed.HasField("served"):
        return []
    return [f"served {level_brief(lv)}" for lv in completed.served.levels] + [completed.served.verdict]
