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
    """What the engine reports of its traffic; `observers` (the Prometheus exporter) hear each event too."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.observers: list = []  # objects with first_token, next_token, finished, swap_held
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

    def first_token(self, seconds: float) -> None:
        """The time from a request's arrival to its first token."""
        for observer in self.observers:
            observer.first_token(seconds)

    def next_token(self, seconds: float) -> None:
        """The time between two tokens of one request."""
        for observer in self.observers:
            observer.next_token(seconds)

    def finished(self, outcome: str) -> None:
        """How a request ended: ok | bad_request | cancelled | error."""
        for observer in self.observers:
            observer.finished(outcome)

    def swap_held(self, seconds: float) -> None:
        """How long a swap attempt held the model."""
        for observer in self.observers:
            observer.swap_held(seconds)

    def window(self, seconds: float) -> Window:
        """Tokens produced and latencies of requests finished in the last `seconds`."""
        since = self.clock() - seconds
        with self._lock:
            tokens = sum(n for t, n in self._tokens if t >= since)
            latencies = [lat for t, lat in self._requests if t >= since]
        return Window(tokens, latencies)
