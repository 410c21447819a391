"""The server's Prometheus endpoint, scraped over HTTP while the tiny model serves and a kernel is swapped in."""

from __future__ import annotations

import asyncio
import urllib.request

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families
from server_fixtures import HERE, load_candidate, rmsnorm_contract

from services.core.pb import events_pb2 as pb
from services.core.pb import inference_pb2 as ipb
from services.core.pb import inference_pb2_grpc as ipb_grpc
from services.server.engine import BadRequest
from services.server.grpc_api import start_grpc
from services.server.hotswap import apply_swap
from services.server.prometheus import Exporter
from services.server.swaps import SwapRegistry


def _scrape(port: int) -> dict[str, dict]:
    """{metric family: {(sample name, labels): value}} from the live endpoint."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out: dict[str, dict] = {}
    for family in text_string_to_metric_families(text):
        out[family.name] = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in family.samples}
    return out


async def _drain(engine, ids, max_new, stop_after=None) -> int:
    produced = 0
    agen = engine.generate(ids, max_new, stop_at_eos=False)
    async for chunk in agen:  # tokens as they come: one a step, or what piled up meanwhile
        produced += len(chunk)
        if stop_after is not None and produced >= stop_after:
            await agen.aclose()  # the client went away
            break
    return produced


async def test_traffic_queue_and_live_kernels_are_scraped(engine):
    swaps = SwapRegistry()
    exporter = Exporter(engine, swaps)
    server, thread = exporter.serve("127.0.0.1:0")
    try:
        port = server.server_port
        before = _scrape(port)
        assert before["yantra_queue_depth"][("yantra_queue_depth", ())] == 0
        assert before["yantra_requests"][("yantra_requests_total", (("outcome", "ok"),))] == 0

        ids = engine.encode("Hello there")
        produced = sum(await asyncio.gather(_drain(engine, ids, 6), _drain(engine, ids, 4)))
        stopped = await _drain(engine, ids, 6, stop_after=2)
        assert 2 <= stopped < 6
        try:
            await _drain(engine, [], 3)
        except BadRequest:
            pass
        got = _scrape(port)
        assert got["yantra_generated_tokens"][("yantra_generated_tokens_total", ())] == produced + stopped
        assert got["yantra_requests"][("yantra_requests_total", (("outcome", "ok"),))] == 2
        assert got["yantra_requests"][("yantra_requests_total", (("outcome", "cancelled"),))] == 1
        assert got["yantra_requests"][("yantra_requests_total", (("outcome", "bad_request"),))] == 1
        ttft = got["yantra_time_to_first_token_seconds"]
        itl = got["yantra_inter_token_latency_seconds"]
        assert ttft[("yantra_time_to_first_token_seconds_count", ())] == 3
        # one gap a delivery after the first: a token each, or what piled up while the reader was behind
        assert 1 <= itl[("yantra_inter_token_latency_seconds_count", ())] <= produced + stopped - 3
        assert got["yantra_active_requests"][("yantra_active_requests", ())] == 0
        assert got["yantra_batch_waiting"][("yantra_batch_waiting", ())] == 0
        assert (
            got["yantra_batch_rows"][("yantra_batch_rows", ())]
            >= got["yantra_batch_requests"][("yantra_batch_requests", ())]
        )

        handle = await engine.exclusive(
            apply_swap, engine.model, rmsnorm_contract(), load_candidate(HERE / "rmsnorm_kernel.py")
        )
        committed = pb.SwapCommitted(swap_id="swap-r1-c1", target_class=rmsnorm_contract().target)
        swaps.add(committed, handle)
        engine.stats.swap_held(0.3)
        try:
            got = _scrape(port)
            live = got["yantra_live_kernel"]
            assert live == {("yantra_live_kernel", (("swap_id", "swap-r1-c1"), ("target", committed.target_class))): 1}
            assert got["yantra_swap_hold_seconds"][("yantra_swap_hold_seconds_count", ())] == 1
            swaps.mark_rolled_back("swap-r1-c1")
            assert _scrape(port)["yantra_live_kernel"] == {}
        finally:
            handle.revert()
    finally:
        server.shutdown()
        engine.stats.observers.remove(exporter)


def _requests(scraped: dict, outcome: str) -> float:
    return scraped["yantra_requests"][("yantra_requests_total", (("outcome", outcome),))]


async def test_generate_requests_refused_over_grpc_are_counted_by_why(engine):
    """What gRPC refuses before the engine sees it — bad arguments, a body that does not decode, a full server —
    is counted under its outcome, once, beside the requests the engine serves."""
    exporter = Exporter(engine, SwapRegistry())
    http, _ = exporter.serve("127.0.0.1:0")
    server, port = await start_grpc(engine, "127.0.0.1:0")
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = ipb_grpc.InferenceStub(channel)

            async def generate(**request) -> grpc.StatusCode:
                try:
                    [_ async for _ in stub.Generate(ipb.GenerateRequest(**request))]
                except grpc.aio.AioRpcError as exc:
                    return exc.code()
                return grpc.StatusCode.OK

            bad = [{"prompt": "", "max_new_tokens": 4}, {"prompt": "hi", "max_new_tokens": 0}]
            bad.append({"token_ids": [1, 10**6], "max_new_tokens": 4})
            for request in bad:
                assert await generate(**request) == grpc.StatusCode.INVALID_ARGUMENT
            with pytest.raises(grpc.aio.AioRpcError) as err:  # field 1 (prompt) holding bytes that are not UTF-8
                [_ async for _ in channel.unary_stream("/yantra.v1.Inference/Generate")(b"\x0a\x02\xff\xfe\x10\x04")]
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            engine.max_active, saved = 0, engine.max_active  # full: every request is refused
            try:
                assert await generate(prompt="hi", max_new_tokens=2) == grpc.StatusCode.RESOURCE_EXHAUSTED
            finally:
                engine.max_active = saved
            assert await generate(prompt="hi", max_new_tokens=2) == grpc.StatusCode.OK
        got = _scrape(http.server_port)
        assert _requests(got, "bad_request") == 4
        assert _requests(got, "overloaded") == 1
        assert _requests(got, "ok") == 1
        assert _requests(got, "cancelled") == _requests(got, "error") == 0
        assert got["yantra_generated_tokens"][("yantra_generated_tokens_total", ())] == 2
    finally:
        await server.stop(0)
        http.shutdown()
        engine.stats.observers.remove(exporter)
