"""Periodic ServerMetrics on the metrics stream: throughput and latency over a sliding window."""

from __future__ import annotations

import asyncio
import logging
import math
import socket
import time
import uuid

from services.core import events as ev
from services.core.bus import Bus
from services.core.pb import events_pb2 as pb
from services.server.engine import Engine
from services.server.stats import Window
from services.server.swaps import SwapRegistry

log = logging.getLogger(__name__)

EVERY_S = 2.0
METRICS_RUN = "metrics"  # metrics belong to no run; the envelope still needs a run id


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


def window_metrics(window: Window, window_s: float, **fields) -> pb.ServerMetrics:
    return pb.ServerMetrics(
        tokens_per_s=window.tokens / window_s if window_s > 0 else 0.0,
        p50_latency_ms=percentile(window.latencies_s, 50) * 1e3,
        p95_latency_ms=percentile(window.latencies_s, 95) * 1e3,
        requests=len(window.latencies_s),
        window_s=window_s,
        **fields,
    )


def snapshot(engine: Engine, server_id: str, window_s: float, swaps: SwapRegistry) -> pb.ServerMetrics:
    return window_metrics(
        engine.stats.window(window_s),
        window_s,
        server_id=server_id,
        model=engine.loaded.name,
        active_swaps=swaps.active_count(),
        device=engine.loaded.device,
        active_requests=engine.active,
        batch_requests=engine.batcher.stepped if engine.batcher else 0,
        waiting_requests=len(engine.batcher.pending) if engine.batcher else 0,
        graphs=engine.graphs,
    )


def default_server_id(addr: str) -> str:
    return f"{socket.gethostname()}:{addr.rsplit(':', 1)[-1]}"


async def metrics_loop(
    bus: Bus, engine: Engine, swaps: SwapRegistry, stop: asyncio.Event, server_id: str, every_s: float = EVERY_S
):
    """Publish a snapshot every `every_s` until stop; a failed publish is logged and retried next tick."""
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), timeout=every_s)
            return
        except TimeoutError:
            pass
        msg = snapshot(engine, server_id, every_s, swaps)
        env = ev.make_envelope(METRICS_RUN, msg, producer="server", time_ns=time.time_ns(), event_id=str(uuid.uuid4()))
        try:
            await bus.publish_metrics(env)
        except Exception as exc:
            log.warning("metrics publish failed: %s", exc)
