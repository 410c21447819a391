"""Figures the TUI shows that are computed from an event's numbers (pure, no I/O).

The judge records raw timings per shape; the speed-ups and the share of copy bandwidth shown
in the candidates table are derived here, the same way every time, so a replay shows the same
figures as the live screen did.
"""

from __future__ import annotations

import math
import re

from google.protobuf.message import Message

DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float64": 8, "int8": 1}
_INT = re.compile(r"\d+")


def short_class(class_path: str) -> str:
    """`transformers.models.qwen2.modeling_qwen2.Qwen2RMSNorm` -> `Qwen2RMSNorm`."""
    return class_path.rsplit(".", 1)[-1] if class_path else "-"


def shape_numel(shape: str) -> int:
    """Elements in a shape written as "32x256", "(2, 7, 256)" or "[1,1536]"; 0 when it names no size."""
    dims = [int(d) for d in _INT.findall(shape)]
    return math.prod(dims) if dims else 0


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v > 0 and math.isfinite(v)]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def speedup_over(rows, baseline: str) -> float | None:
    """Geometric mean over shapes of baseline time / candidate time; None when nothing to compare."""
    ratios = [getattr(r, baseline) / r.candidate_us for r in rows if r.candidate_us > 0 and getattr(r, baseline) > 0]
    return geomean(ratios)


def copy_bandwidth_fraction(rows, dtype_bytes: int, peak_bytes_per_s: float) -> float | None:
    """Share of the copy ceiling the candidate reaches at its largest timed shape.

    Bytes moved are taken as the input read plus the output written (2 x numel x dtype bytes): the
    floor for a memory-bound op whose output has the input's shape (a norm, an activation), which
    is what the templates write today. The largest shape is the one least dominated by launch time.
    """
    if dtype_bytes <= 0 or peak_bytes_per_s <= 0:
        return None
    timed = [(shape_numel(r.shape), r.candidate_us) for r in rows if r.candidate_us > 0 and shape_numel(r.shape)]
    if not timed:
        return None
    numel, us = max(timed)
    return (2 * numel * dtype_bytes) / (us * 1e-6) / peak_bytes_per_s


def rejection_reason(judged: Message) -> str:
    """Why the judge turned a candidate down: the first failing layer's own words, else the judge's reason."""
    if judged.reward >= 0:
        return ""
    o = judged.observed
    if o.HasField("static_check") and not o.static_check.passed and o.static_check.findings:
        f = o.static_check.findings[0]
        return f"static {f.rule_id}: {f.reason}"
    if o.HasField("contract") and not o.contract.passed and o.contract.error:
        return f"contract: {o.contract.error}"
    if o.HasField("correctness") and not o.correctness.passed and o.correctness.error:
        return f"correctness: {o.correctness.error}"
    return judged.reason


def seconds(ns: int) -> float:
    return ns / 1e9


def fmt_duration(s: float) -> str:
    if s < 0:
        return "-"
    if s < 10:
        return f"{s:.2f}s"
    if s < 600:
        return f"{s:.1f}s"
    return f"{s / 60:.0f}m"


def fmt_ratio(x: float | None) -> str:
    return "-" if x is None else f"x{x:.2f}"


def fmt_pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def fmt_err(x: float) -> str:
    return f"{x:.1e}"


def fmt_us(us: float) -> str:
    if us <= 0:
        return "-"
    if us < 1000:
        return f"{us:.1f}us"
    if us < 1_000_000:
        return f"{us / 1000:.1f}ms"
    return f"{us / 1e6:.2f}s"


def fmt_clock(ns: int) -> str:
    """Envelope time as UTC wall clock with milliseconds (UTC: the same on every machine that replays)."""
    if ns <= 0:
        return "--:--:--"
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ns / 1e9, tz=UTC).strftime("%H:%M:%S.%f")[:-3]
