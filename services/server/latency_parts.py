"""Where served time goes: a first token's wait split into its parts, and each tick's hand-off to the event loop.

A client sees one TTFT; the server knows where it went. A request waits in the queue until a tick admits it
(`queue`), its prompt is prefilled and its first token read back on the engine thread (`prefill`), and the event
loop, which the gRPC and HTTP layers share, hands that token to the request (`first_handoff`). Every tick's tokens
cross the same way (`handoff`: tick ended → tokens put in the requests' queues), and each tick takes `tick` on the
engine thread. A hand-off that grows with the streams means the event loop (or the interpreter lock it shares with
the engine thread) is what users wait for, not the GPU: issue 27's served-versus-engine gap at 16-64 streams.

`LatencyParts` keeps the last MAX_SAMPLES of each part, stamped, and answers percentiles over a window. Written
from the engine thread and the event loop, hence the lock.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import dataclass

QUEUE, PREFILL, FIRST_HANDOFF, HANDOFF, TICK = "queue", "prefill", "first_handoff", "handoff", "tick"
CAPTURE = "capture"  # a graph captured between holds of the batch loop under load: every stream waited for it
PARTS = (QUEUE, PREFILL, FIRST_HANDOFF, HANDOFF, TICK, CAPTURE)
MAX_SAMPLES = 20_000


@dataclass(frozen=True)
class Spread:
    name: str
    count: int
    p50_s: float
    p99_s: float
    max_s: float
    mean_s: float


def nearest_rank(ordered: list[float], q: float) -> float:
    """The q-th percentile (0..100) of sorted values by nearest rank; 0 for none."""
    if not ordered:
        return 0.0
    return ordered[max(1, min(len(ordered), math.ceil(q / 100 * len(ordered)))) - 1]


def spread(name: str, values: list[float]) -> Spread:
    ordered = sorted(values)
    mean = sum(ordered) / len(ordered) if ordered else 0.0
    top = ordered[-1] if ordered else 0.0
    return Spread(name, len(ordered), nearest_rank(ordered, 50), nearest_rank(ordered, 99), top, mean)


class LatencyParts:
    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self._samples = {part: deque(maxlen=MAX_SAMPLES) for part in PARTS}
        self._lock = threading.Lock()

    def add(self, part: str, seconds: float) -> None:
        with self._lock:
            self._samples[part].append((self.clock(), max(0.0, seconds)))

    def window(self, seconds: float = 0.0) -> list[Spread]:
        """Each part's spread over the last `seconds` (0: every sample kept), in PARTS order."""
        since = self.clock() - seconds if seconds > 0 else -math.inf
        with self._lock:
            kept = {part: [v for t, v in samples if t >= since] for part, samples in self._samples.items()}
        return [spread(part, kept[part]) for part in PARTS]
