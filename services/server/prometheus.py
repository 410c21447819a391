"""Prometheus metrics of the live server, in the text format on an HTTP port (YANTRA_METRICS_ADDR; off when unset).

Traffic is counted as it happens (the engine's RequestStats tell this exporter of every first token, every
next token and every request's end); what the server holds now — requests waiting for the model, requests
being generated, the kernel serving each target — is read at scrape time, so a scrape never goes stale.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily

# Seconds: a decode step on a GPU is ~1-30 ms, a first token (prefill + queue) up to seconds.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# a hand-off or a tick is well under a millisecond when the event loop keeps up: finer buckets below the first
PART_BUCKETS = (0.0001, 0.00025, 0.0005, *LATENCY_BUCKETS)
SWAP_HOLD_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
# How a Generate request ended: bad_request and overloaded are refused before the engine takes them
# (stats.CountRefused), the others end in the engine.
OUTCOMES = ("ok", "bad_request", "overloaded", "cancelled", "error")


class _Live:
    """Gauges read from the engine (and the swap registry) when scraped."""

    def __init__(self, engine, swaps):
        self.engine, self.swaps = engine, swaps

    def collect(self):
        engine = self.engine
        # Callers of Engine.exclusive waiting for the model lock: the batch loop, solo-lane decode steps, swaps,
        # profiles, measurements. A request waiting for a batch slot is not one (yantra_batch_waiting counts those).
        yield GaugeMetricFamily(
            "yantra_queue_depth",
            "callers waiting for the model lock (batch loop, solo decode steps, swaps, profiles)",
            engine.waiting,
        )
        yield GaugeMetricFamily("yantra_active_requests", "requests being generated", engine.active)
        batcher = engine.batcher
        if batcher is not None:  # batch occupancy: requests in the last step, and the rows it ran
            yield GaugeMetricFamily("yantra_batch_requests", "requests in the last step", batcher.stepped)
            yield GaugeMetricFamily("yantra_batch_rows", "rows of the last step (its bucket)", batcher.rows)
            yield GaugeMetricFamily("yantra_batch_waiting", "requests waiting for a slot", len(batcher.pending))
        live = GaugeMetricFamily(
            "yantra_live_kernel", "1 for the swap serving each target", labels=["target", "swap_id"]
        )
        for record in self.swaps.records():
            if record.state == "committed":
                live.add_metric([record.target_class, record.swap_id], 1)
        yield live


class Exporter:
    """The server's metrics registry; an observer of the engine's traffic."""

    def __init__(self, engine, swaps):
        self.registry = CollectorRegistry()
        self.tokens = Counter("yantra_generated_tokens", "tokens generated", registry=self.registry)
        self.requests = Counter(
            "yantra_requests", "Generate requests ended, by outcome (refused ones included)", ["outcome"],
            registry=self.registry,
        )  # fmt: skip
        for outcome in OUTCOMES:  # every outcome shows from the first scrape, at 0
            self.requests.labels(outcome)
        self.ttft = Histogram(
            "yantra_time_to_first_token_seconds", "arrival to first token", buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )  # fmt: skip
        self.itl = Histogram(
            "yantra_inter_token_latency_seconds",
            "time between two deliveries of tokens to a request (a token each, or what piled up while it was behind)",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )  # fmt: skip
        self.swap_hold = Histogram(
            "yantra_swap_hold_seconds", "how long a swap attempt held the model (apply, parity, revert or commit)",
            buckets=SWAP_HOLD_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.parts = Histogram(
            "yantra_latency_part_seconds",
            "where served time went (services/server/latency_parts.py): a first token's queue, prefill and hand-off "
            "to the event loop, each tick's hand-off and length",
            ["part"], buckets=PART_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.registry.register(_Live(engine, swaps))
        engine.stats.observers.append(self)

    def generated(self, n: int) -> None:
        self.tokens.inc(n)  # tokens, not chunks: a chunk is one token today, and a count must not rest on that

    def first_token(self, seconds: float) -> None:
        self.ttft.observe(seconds)

    def next_token(self, seconds: float) -> None:
        self.itl.observe(seconds)

    def finished(self, outcome: str) -> None:
        self.requests.labels(outcome if outcome in OUTCOMES else "error").inc()

    def swap_held(self, seconds: float) -> None:
        self.swap_hold.observe(seconds)

    def latency(self, part: str, seconds: float) -> None:
        self.parts.labels(part).observe(seconds)

    def serve(self, addr: str):
        """Start the HTTP endpoint on "host:port" (port 0: any free one); returns (server, thread)."""
        host, _, port = addr.rpartition(":")
        return start_http_server(int(port), addr=host or "0.0.0.0", registry=self.registry)
