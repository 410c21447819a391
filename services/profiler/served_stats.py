"""The statistics of a served-load measure, pure: one repeat's figures from its requests' timings, a figure's 95%
confidence interval over a level's repeats, and when a level has been repeated enough.

Definitions as bench/load_stats.py's (vLLM's benchmark_serving): TTFT from sending a request to its first chunk
carrying tokens; ITL every gap between successive chunks carrying tokens, of every request; throughput the output
tokens of the completed requests over the repeat's wall time. The interval is Student's t over the repeats' values
(each repeat one sample): the repeats are independent rounds of the same seeded load, so their spread is the
measure's own noise, which is what a run's after is judged against.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from services.core.pb import events_pb2 as pb

# The figures of a repeat, and which way is better: throughput higher, the latencies lower.
FIGURES = ("throughput", "ttft_p99", "itl_p99")
HIGHER_IS_BETTER = {"throughput": True, "ttft_p99": False, "itl_p99": False}
UNITS = {"throughput": "tok/s", "ttft_p99": "ms", "itl_p99": "ms"}

# Two-sided 95% quantiles of Student's t by degrees of freedom (repeats - 1); past the table, the normal's 1.96 is
# within 2% of the truth (t at 30 df is 2.042).
_T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
    2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


@dataclass
class Timed:
    """One request as the client saw it: times in seconds on one clock, tokens counted from the chunks."""

    sent: float
    asked_tokens: int
    chunk_times: list[float] = field(default_factory=list)  # each chunk that carried tokens, when it arrived
    output_tokens: int = 0
    ended: float | None = None
    error: str = ""

    @property
    def ok(self) -> bool:
        """Completed without an error and with every token it asked for (the load asks ignore_eos)."""
        return not self.error and self.ended is not None and self.output_tokens == self.asked_tokens


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100), linear between closest ranks (numpy's default); 0.0 when there are none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def repeat_figures(requests: list[Timed], wall_s: float) -> pb.ServedRepeat:
    """One repeat's figures over its completed requests (a failed or short one is counted, never timed)."""
    done = [r for r in requests if r.ok]
    ttfts = [(r.chunk_times[0] - r.sent) * 1e3 for r in done if r.chunk_times]
    gaps = [(b - a) * 1e3 for r in done for a, b in zip(r.chunk_times, r.chunk_times[1:], strict=False)]
    return pb.ServedRepeat(
        tokens_per_s=sum(r.output_tokens for r in done) / wall_s if wall_s > 0 else 0.0,
        ttft_p99_ms=percentile(ttfts, 99),
        itl_p99_ms=percentile(gaps, 99),
        requests=len(requests),
        failed=len(requests) - len(done),
        wall_s=wall_s,
    )


def figure_values(level: pb.ServedLevel, figure: str) -> list[float]:
    """One figure of each repeat of a level that completed a request (a repeat of failures has no figures)."""
    attr = {"throughput": "tokens_per_s", "ttft_p99": "ttft_p99_ms", "itl_p99": "itl_p99_ms"}[figure]
    return [getattr(r, attr) for r in level.repeats if r.requests > r.failed]


def t95(repeats: int) -> float:
    """Student's two-sided 95% quantile for the mean of `repeats` samples (at least two)."""
    return _T95[repeats - 2] if repeats - 2 < len(_T95) else 1.96


def interval(values: list[float], plan: pb.ServedLoadPlan) -> pb.ServedInterval:
    """The mean and its 95% half-width; infinite with fewer than two values (no spread measured yet)."""
    n = len(values)
    if n == 0:
        return pb.ServedInterval(mean=0.0, half_width=math.inf, repeats=0, converged=False)
    mean = sum(values) / n
    if n < 2:
        return pb.ServedInterval(mean=mean, half_width=math.inf, repeats=n, converged=False)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t95(n) * sd / math.sqrt(n)
    converged = n >= max(2, plan.min_repeats) and half <= plan.target_half_width * abs(mean)
    return pb.ServedInterval(mean=mean, half_width=half, repeats=n, converged=converged)


def level_intervals(level: pb.ServedLevel, plan: pb.ServedLoadPlan) -> dict[str, pb.ServedInterval]:
    return {f: interval(figure_values(level, f), plan) for f in FIGURES}


def level_done(level: pb.ServedLevel, plan: pb.ServedLoadPlan) -> bool:
    """Whether a level has been repeated enough: every figure's interval converged, or the plan's repeats are spent."""
    if len(level.repeats) >= plan.max_repeats:
        return True
    return all(i.converged for i in level_intervals(level, plan).values())
