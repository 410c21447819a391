"""ServerMetrics: window arithmetic, and snapshots published on the real metrics stream."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from services.core import events as ev
from services.server.metrics import metrics_loop, percentile, window_metrics
from services.server.stats import RequestStats
from services.server.swaps import SwapRegistry


def test_percentiles_are_nearest_rank():
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0 and percentile(values, 95) == 95.0
    assert percentile([], 50) == 0.0 and percentile([3.0], 95) == 3.0


def test_window_counts_only_recent_tokens_and_requests():
    now = [100.0]
    stats = RequestStats(clock=lambda: now[0])
    stats.tokens(5)
    stats.request_done(0.5)
    now[0] = 110.0
    for latency in (0.1, 0.2, 0.3):
        stats.tokens(4)
        stats.request_done(latency)
    window = stats.window(2.0)
    assert window.tokens == 12 and window.latencies_s == [0.1, 0.2, 0.3]
    msg = window_metrics(window, 2.0, model="m", device="cpu")
    assert msg.tokens_per_s == 6.0 and msg.requests == 3 and msg.window_s == 2.0
    assert msg.p50_latency_ms == pytest.approx(200.0) and msg.p95_latency_ms == pytest.approx(300.0)
    assert stats.requests_served == 4


async def test_metrics_loop_publishes_on_the_metrics_stream(bus, engine):
    server_id = "test-" + uuid.uuid4().hex[:8]
    async for _ in engine.generate(engine.encode("hi"), 3):
        pass
    stop = asyncio.Event()
    task = asyncio.create_task(metrics_loop(bus, engine, SwapRegistry(), stop, server_id, every_s=0.2))
    await asyncio.sleep(0.7)
    stop.set()
    await asyncio.wait_for(task, 2.0)
    mine = []
    for _seq, data, _subject in await bus._read(ev.METRICS_STREAM, ev.metrics_subject("server")):
        env = ev.decode(data)
        msg = ev.unpack(env)
        if msg.server_id == server_id:
            mine.append((env, msg))
    assert len(mine) >= 2
    env, msg = mine[0]
    assert env.type == "ServerMetrics" and env.producer == "server"
    assert msg.model == "tiny-qwen2" and msg.device == "cpu" and msg.window_s == pytest.approx(0.2)


async def test_a_snapshot_says_how_full_the_batch_is(engine):
    from services.server.metrics import snapshot

    stream = engine.generate(engine.encode("Hello there"), 20, stop_at_eos=False)
    others = [engine.generate(engine.encode(p), 20, stop_at_eos=False) for p in ("A", "B c")]
    for s in (stream, *others):
        await anext(s)
    msg = snapshot(engine, "s", 1.0, SwapRegistry())
    assert msg.active_requests == 3 and 1 <= msg.batch_requests <= 3 and msg.waiting_requests == 0
    assert not msg.graphs  # a CPU steps eagerly
    for s in (stream, *others):
        await s.aclose()
