"""The gRPC surface against a real grpc.aio server over loopback, serving the live tiny model."""

from __future__ import annotations

import grpc
import pytest
from server_fixtures import QWEN_NORM, as_log, swap_run

from services.core import events as ev
from services.core.pb import events_pb2 as pb
from services.core.pb import inference_pb2 as ipb
from services.core.pb import inference_pb2_grpc as ipb_grpc
from services.server.grpc_api import start_grpc
from services.server.service import ServerService


@pytest.fixture
async def channel(engine):
    server, port = await start_grpc(engine, "127.0.0.1:0")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        yield ch
    await server.stop(0)


async def _generate(channel, **request):
    stub = ipb_grpc.InferenceStub(channel)
    return [chunk async for chunk in stub.Generate(ipb.GenerateRequest(**request))]


async def test_generate_streams_tokens_then_a_final_chunk(engine, channel):
    chunks = await _generate(channel, prompt="Hello", max_new_tokens=6)
    assert [c.done for c in chunks] == [False] * 6 + [True]
    tokens = [t for c in chunks for t in c.token_ids]
    assert tokens == (await engine.exclusive(engine.decode, engine.encode("Hello"), 6))[0]
    assert "".join(c.text for c in chunks) == engine.tokenizer.decode(tokens)
    assert chunks[-1].tokens_per_s > 0


async def test_generate_from_token_ids(engine, channel):
    chunks = await _generate(channel, token_ids=[72, 101, 300], max_new_tokens=3)
    assert [t for c in chunks for t in c.token_ids] == (await engine.exclusive(engine.decode, [72, 101, 300], 3))[0]


@pytest.mark.parametrize(
    ("request_", "why"),
    [
        ({"prompt": "", "max_new_tokens": 4}, "empty"),
        ({"prompt": "hi", "max_new_tokens": 0}, "max_new_tokens"),
        ({"prompt": "hi", "max_new_tokens": 4097}, "max_new_tokens"),
        ({"token_ids": [1, 99999], "max_new_tokens": 4}, "outside the vocabulary"),
        ({"token_ids": [-3], "max_new_tokens": 4}, "outside the vocabulary"),
    ],
)
async def test_bad_generate_arguments_are_invalid_argument(channel, request_, why):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await _generate(channel, **request_)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and why in err.value.details()


async def test_health_and_module_state(engine, channel):
    admin = ipb_grpc.AdminStub(channel)
    health = await admin.Health(ipb.HealthRequest())
    assert health.ready and health.model == "tiny-qwen2" and health.device == "cpu" and health.dtype == "float32"
    state = await admin.GetModuleState(ipb.ModuleStateRequest(class_path=QWEN_NORM))
    assert state.instances == 5 and state.patched == 0 and state.active_swap_id == ""
    assert state.introspection.class_path == QWEN_NORM and state.introspection.leaf
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await admin.GetModuleState(ipb.ModuleStateRequest(class_path="no.such.Module"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND and "no.such.Module" in err.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await admin.GetModuleState(ipb.ModuleStateRequest())
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_capture_profile_and_measure_decode_over_grpc(channel):
    admin = ipb_grpc.AdminStub(channel)
    reply = await admin.CaptureProfile(ipb.CaptureProfileRequest(prompts=["Hello", "there"], max_new_tokens=4))
    obs = reply.observation
    assert obs.requests == 2 and obs.tokens_generated == 8
    assert any(m.introspection.class_path == QWEN_NORM and m.calls > 0 for m in obs.modules)
    m = await admin.MeasureDecode(ipb.MeasureDecodeRequest(prompts=["Hello"], max_new_tokens=4, repeats=2))
    assert m.tokens_generated == 8 and m.tokens_per_s > 0 and m.seconds > 0
    for bad in (ipb.CaptureProfileRequest(), ipb.CaptureProfileRequest(prompts=["x", ""], max_new_tokens=2)):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await admin.CaptureProfile(bad)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "prompt" in err.value.details()


async def test_list_swaps_follows_commit_and_rollback(engine, channel, good_source, tmp_path):
    admin = ipb_grpc.AdminStub(channel)
    assert list((await admin.ListSwaps(ipb.ListSwapsRequest())).swaps) == []
    service = ServerService(engine, tmp_path)
    log = as_log(swap_run("grpc-run", good_source))
    (committed,) = await service.handle(log[-1], log)
    assert isinstance(committed, pb.SwapCommitted), committed

    swaps = (await admin.ListSwaps(ipb.ListSwapsRequest())).swaps
    assert [(s.swap_id, s.state, s.modules_patched) for s in swaps] == [(committed.swap_id, "committed", 5)]
    state = await admin.GetModuleState(ipb.ModuleStateRequest(class_path=QWEN_NORM))
    assert state.patched == 5 and state.active_swap_id == committed.swap_id
    assert (await admin.Health(ipb.HealthRequest())).active_swaps == 1
    chunks = await _generate(channel, prompt="Hello", max_new_tokens=4)  # serving through the kernel
    assert len(chunks) == 5

    request = pb.RollbackRequested(swap_id=committed.swap_id, reason="test")
    trigger = ev.Recorded(99, ev.make_envelope("grpc-run", request, producer="test", time_ns=1, event_id="rb"))
    (rolled,) = await service.handle(trigger, [*log, trigger])
    assert rolled.observed.modules_matched == 5
    swaps = (await admin.ListSwaps(ipb.ListSwapsRequest())).swaps
    assert [(s.swap_id, s.state) for s in swaps] == [(committed.swap_id, "rolled_back")]
    assert (await admin.GetModuleState(ipb.ModuleStateRequest(class_path=QWEN_NORM))).patched == 0


@pytest.fixture
async def guarded(engine):
    server, port = await start_grpc(engine, "127.0.0.1:0", admin_token="s3cret")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        yield ch, f"127.0.0.1:{port}"
    await server.stop(0)


async def test_with_an_admin_token_the_admin_rpcs_need_it_but_health_and_generation_do_not(engine, guarded):
    from services.core.admin_auth import metadata

    channel, _ = guarded
    admin = ipb_grpc.AdminStub(channel)
    for bad in ((), metadata("wrong"), (("authorization", "s3cret"),)):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await admin.ListSwaps(ipb.ListSwapsRequest(), metadata=bad)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED and "YANTRA_ADMIN_TOKEN" in err.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await admin.MeasureDecode(ipb.MeasureDecodeRequest(prompts=["hi"], max_new_tokens=2))
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert list((await admin.ListSwaps(ipb.ListSwapsRequest(), metadata=metadata("s3cret"))).swaps) == (
        engine.swaps.records()
    )
    assert (await admin.Health(ipb.HealthRequest())).ready  # probes need no secret
    assert len(await _generate(channel, prompt="Hello", max_new_tokens=2)) == 3  # the public surface


async def test_the_profilers_client_and_the_cli_send_the_token(engine, guarded):
    from services.core.server_client import list_swaps
    from services.profiler.adapters import AdminCallFailed, AdminClient

    _, addr = guarded
    client = AdminClient(addr, token="s3cret")
    assert (await client.measure_decode(["hi"], 2, 1)).tokens_per_s > 0
    await client.close()
    wrong = AdminClient(addr, token="nope", attempts=3, backoff_s=10)  # refused, and not retried
    with pytest.raises(AdminCallFailed, match="MeasureDecode .* failed: UNAUTHENTICATED: admin RPCs need"):
        await wrong.measure_decode(["hi"], 2, 1)
    await wrong.close()
    assert await list_swaps(addr, "s3cret") == engine.swaps.records()
