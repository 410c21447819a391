"""Where served time goes (services/server/latency_parts.py): the parts' spreads over a window, and the live tiny
model's server splitting each first token into queue, prefill and hand-off and timing every tick, read over gRPC."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from services.core.pb import inference_pb2 as ipb
from services.core.pb import inference_pb2_grpc as ipb_grpc
from services.server.grpc_api import start_grpc
from services.server.latency_parts import PARTS, LatencyParts, spread
from services.server.swaps import SwapRegistry


def test_a_spread_is_read_by_nearest_rank_and_a_window_keeps_only_its_samples():
    assert spread("x", []) == spread("x", [])  # no samples: zeros, not an error
    assert spread("x", []).count == 0 and spread("x", []).p99_s == 0.0
    s = spread("x", [float(v) for v in range(100, 0, -1)])
    assert (s.count, s.p50_s, s.p99_s, s.max_s, s.mean_s) == (100, 50.0, 99.0, 100.0, 50.5)
    now = [0.0]
    parts = LatencyParts(clock=lambda: now[0])
    parts.add("queue", 5.0)
    now[0] = 10.0
    parts.add("queue", 1.0)
    parts.add("tick", -0.5)  # a clock read twice across threads can come out negative by a hair: kept as 0
    by_name = {p.name: p for p in parts.window(5.0)}
    assert [p.name for p in parts.window()] == list(PARTS)
    assert by_name["queue"].count == 1 and by_name["queue"].max_s == 1.0 and by_name["tick"].max_s == 0.0
    assert {p.name: p.count for p in parts.window()}["queue"] == 2


@pytest.fixture
async def channel(engine):
    server, port = await start_grpc(engine, "127.0.0.1:0", swaps=SwapRegistry())
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        yield ch
    await server.stop(0)


async def _counts(admin) -> dict[str, int]:
    reply = await admin.ServingLatency(ipb.ServingLatencyRequest())
    return {p.name: p.count for p in reply.parts}


async def test_each_first_token_is_split_into_its_parts_and_every_tick_is_timed(engine, channel):
    admin, inference = ipb_grpc.AdminStub(channel), ipb_grpc.InferenceStub(channel)
    before = await _counts(admin)

    async def generate(prompt: str) -> int:
        request = ipb.GenerateRequest(prompt=prompt, max_new_tokens=5, ignore_eos=True)
        return sum([len(c.token_ids) async for c in inference.Generate(request)])

    assert await asyncio.gather(*(generate(p) for p in ("Hello", "The sky", "One two three"))) == [5, 5, 5]
    reply = await admin.ServingLatency(ipb.ServingLatencyRequest(window_s=60))
    after = {p.name: p for p in reply.parts}
    counted = {name: after[name].count - before.get(name, 0) for name in PARTS}
    assert counted["queue"] == counted["prefill"] == counted["first_handoff"] == 3, counted  # one each a request
    assert counted["tick"] >= 4 and counted["handoff"] == counted["tick"], counted  # 5 tokens: the prefill's + 4 steps
    assert counted["capture"] == 0  # a CPU steps eagerly: no graph is ever captured under load
    for part in after.values():
        assert 0 <= part.p50_ms <= part.p99_ms <= part.max_ms and part.mean_ms <= part.max_ms, part
    assert after["prefill"].max_ms > 0 and after["tick"].max_ms > 0


async def test_a_negative_window_is_invalid_argument(channel):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await ipb_grpc.AdminStub(channel).ServingLatency(ipb.ServingLatencyRequest(window_s=-1))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "window_s" in err.value.details()
