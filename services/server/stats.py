"""Counters of served traffic, kept by the engine and read by the metrics loop and Health."""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass

MAX_SAMPLES = 20_000


@dataclass(frozen=True)
class Window:
    tokens: int
    latencies_s: list[float]


class RequestStats:
    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.requests_served = 0
        self._tokens: deque[tuple[float, int]] = deque(maxlen=MAX_SAMPLES)
        self._requests: deque[tuple[float, float]] = deque(maxlen=MAX_SAMPLES)
        self._lock = threading.Lock()

    def tokens(self, n: int) -> None:
        with self._lock:
            self._tokens.append((self.clock(), n))

    def request_done(self, latency_s: float) -> None:
        with self._lock:
            self.requests_served += 1
            self._requests.append((self.clock(), latency_s))

    def window(self, seconds: float) -> Window:
        """Tokens produced and latencies of requests finished in the last `seconds`."""
        since = self.clock() - seconds
        with self._lock:
            tokens = sum(n for t, n in self._tokens if t >= since)
            latencies = [lat for t, lat in self._requests if t >= since]
        return Window(tokens, latencies)
