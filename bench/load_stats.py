"""Serving metrics of a load run, pure: per-request timings in, percentiles and rates out (no I/O, no clock).

Definitions (as vLLM's benchmark_serving uses them):
  TTFT   time to first token: the first chunk carrying tokens, from the moment the request was sent
  TPOT   time per output token after the first: (e2e - TTFT) / (output tokens - 1), one value a request
  ITL    inter-token latency: the gaps between successive chunks carrying tokens, every gap of every request
  e2e    from sending the request to its last chunk
  goodput  completed requests a second that meet every SLO given (TTFT and TPOT limits in ms)

Times are seconds in and milliseconds out of `summarize`; throughput counts completed requests only, over the
level's wall time (first request sent to last request ended).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class Request:
    """One request's record: times in seconds on one clock (time.perf_counter), tokens counted from the chunks."""

    sent: float
    input_tokens: int
    asked_tokens: int
    chunk_times: list[float] = field(default_factory=list)  # each chunk that carried tokens, when it arrived
    output_tokens: int = 0
    ended: float | None = None
    error: str = ""  # why it failed ("" when it did not)

    @property
    def ok(self) -> bool:
        """Completed without an error and with every token it asked for (the load asks ignore_eos)."""
        return not self.error and self.ended is not None and self.output_tokens == self.asked_tokens


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation between closest ranks (numpy's default); nan if empty."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is outside 0..100")
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def ttft(r: Request) -> float | None:
    return r.chunk_times[0] - r.sent if r.chunk_times else None


def e2e(r: Request) -> float | None:
    return r.ended - r.sent if r.ended is not None else None


def tpot(r: Request) -> float | None:
    """(e2e - TTFT) / (tokens - 1); None for a request of fewer than two tokens (no time between tokens)."""
    first, total = ttft(r), e2e(r)
    if first is None or total is None or r.output_tokens < 2:
        return None
    return (total - first) / (r.output_tokens - 1)


def itl(r: Request) -> list[float]:
    """The gaps between successive chunks carrying tokens."""
    return [b - a for a, b in zip(r.chunk_times, r.chunk_times[1:], strict=False)]


def meets_slo(r: Request, ttft_ms: float | None = None, tpot_ms: float | None = None) -> bool:
    """Whether a completed request meets every limit given (None: no limit on that figure)."""
    if not r.ok:
        return False
    first, per_token = ttft(r), tpot(r)
    if ttft_ms is not None and (first is None or first * 1e3 > ttft_ms):
        return False
    return tpot_ms is None or per_token is None or per_token * 1e3 <= tpot_ms


def _dist(values_s: list[float]) -> dict:
    ms = [v * 1e3 for v in values_s]
    if not ms:
        return {"mean": None, "p50": None, "p99": None, "max": None}
    return {"mean": sum(ms) / len(ms), "p50": percentile(ms, 50), "p99": percentile(ms, 99), "max": max(ms)}


def summarize(
    requests: list[Request], wall_s: float, ttft_ms: float | None = None, tpot_ms: float | None = None
) -> dict:
    """One level's figures: counts, throughput, goodput and the latency distributions (ms) over completed requests."""
    if wall_s <= 0:
        raise ValueError(f"wall time {wall_s} must be positive")
    done = [r for r in requests if r.ok]
    failed = [r for r in requests if r.error]
    short = [r for r in requests if not r.error and not r.ok]  # ended without every token it asked for
    errors: dict[str, int] = {}
    for r in failed:
        errors[r.error] = errors.get(r.error, 0) + 1
    good = [r for r in done if meets_slo(r, ttft_ms, tpot_ms)]
    out_tokens = sum(r.output_tokens for r in done)
    return {
        "requests": len(requests),
        "completed": len(done),
        "failed": len(failed),
        "incomplete": len(short),
        "errors": errors,
        "wall_s": wall_s,
        "input_tokens": sum(r.input_tokens for r in done),
        "output_tokens": out_tokens,
        "requests_per_s": len(done) / wall_s,
        "output_tokens_per_s": out_tokens / wall_s,
        "total_tokens_per_s": (out_tokens + sum(r.input_tokens for r in done)) / wall_s,
        "slo": {"ttft_ms": ttft_ms, "tpot_ms": tpot_ms},
        "goodput_requests_per_s": len(good) / wall_s,
        "slo_met_fraction": len(good) / len(requests) if requests else 0.0,
        "ttft_ms": _dist([v for r in done if (v := ttft(r)) is not None]),
        "tpot_ms": _dist([v for r in done if (v := tpot(r)) is not None]),
        "itl_ms": _dist([g for r in done for g in itl(r)]),
        "e2e_ms": _dist([v for r in done if (v := e2e(r)) is not None]),
    }
