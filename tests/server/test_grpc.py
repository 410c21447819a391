"""The gRPC surface against a real grpc.aio server over loopback, serving the live tiny model."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from server_fixtures import QWEN_NORM, Outcomes, as_log, swap_run

from services.core import events as ev
from services.core import limits
from services.core.pb import events_pb2 as pb
from services.core.pb import inference_pb2 as ipb
from services.core.pb import inference_pb2_grpc as ipb_grpc
from services.server.grpc_api import AddressUnavailable, address_problem, start_grpc
from services.server.service import ServerService
from services.server.swaps import SwapRegistry

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def swaps():
    """The swap handler's registry, shared with the gRPC server under test (as the server process wires it)."""
    return SwapRegistry()


@pytest.fixture
async def channel(engine, swaps):
    server, port = await start_grpc(engine, "127.0.0.1:0", swaps=swaps)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        yield ch
    await server.stop(0)


async def _generate(channel, **request):
    stub = ipb_grpc.InferenceStub(channel)
    return [chunk async for chunk in stub.Generate(ipb.GenerateRequest(**request))]


async def _tokens(channel, **request) -> int:
    """Tokens a Generate streamed (chunks hold one each, or what piled up while the reader was behind)."""
    chunks = await _generate(channel, **request)
    assert chunks[-1].done and not any(c.done for c in chunks[:-1])
    return sum(len(c.token_ids) for c in chunks)


async def test_generate_streams_tokens_then_a_final_chunk(engine, channel):
    chunks = await _generate(channel, prompt="Hello", max_new_tokens=6)
    assert chunks[-1].done and not any(c.done for c in chunks[:-1])  # tokens as they come, then a final chunk
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
    assert health.max_positions == engine.loaded.max_positions == 512 and len(health.instance_id) == 16
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


async def test_measuring_rpcs_refuse_more_work_than_a_run_asks_naming_the_limit(engine, channel):
    """10,000 prompts held the model for over ten minutes: the count and each prompt's length are bounded before
    any prompt is encoded, as a run's are (services.core.limits)."""
    admin = ipb_grpc.AdminStub(channel)
    many, long = ["Hello"] * 10_000, ["Hi", "x" * (limits.MAX_PROMPT_CHARS + 1)]
    for rpc, name, request in (
        (admin.CaptureProfile, "CaptureProfile", ipb.CaptureProfileRequest(prompts=many, max_new_tokens=4)),
        (admin.MeasureDecode, "MeasureDecode", ipb.MeasureDecodeRequest(prompts=many, max_new_tokens=4, repeats=5)),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await rpc(request, timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details() == f"10000 prompts given; {name} takes at most 16 (limits.MAX_RUN_PROMPTS)"
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await admin.MeasureDecode(ipb.MeasureDecodeRequest(prompts=long, max_new_tokens=4), timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details() == (
        "prompt 2 is 4,001 characters long; MeasureDecode takes prompts of at most 4,000 characters "
        "(limits.MAX_PROMPT_CHARS)"
    )
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await admin.MeasureDecode(ipb.MeasureDecodeRequest(prompts=["Hi"], max_new_tokens=2, repeats=101), timeout=10)
    assert err.value.details() == "repeats must be at most 100, got 101"
    at_limit = ipb.MeasureDecodeRequest(prompts=["Hi"] * limits.MAX_RUN_PROMPTS, max_new_tokens=2)
    assert (await admin.MeasureDecode(at_limit, timeout=60)).tokens_generated == 2 * limits.MAX_RUN_PROMPTS


async def test_generate_refuses_a_prompt_beyond_the_limits_naming_it(channel):
    """A prompt is bounded in characters before it is encoded (on the event loop), token ids in count, stop strings
    in count (services.server.stops)."""
    for request, limit in (
        ({"prompt": "x" * (limits.MAX_GENERATE_PROMPT_CHARS + 1)}, "limits.MAX_GENERATE_PROMPT_CHARS"),
        ({"token_ids": [1] * (limits.MAX_GENERATE_TOKEN_IDS + 1)}, "limits.MAX_GENERATE_TOKEN_IDS"),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await _generate(channel, max_new_tokens=4, **request)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and f"({limit})" in err.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await _generate(channel, prompt="hi", max_new_tokens=4, stop=[f"s{i}" for i in range(9)])
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details() == "at most 8 stop sequences, got 9"


async def test_list_swaps_follows_commit_and_rollback(engine, channel, swaps, good_source, tmp_path):
    admin = ipb_grpc.AdminStub(channel)
    assert list((await admin.ListSwaps(ipb.ListSwapsRequest())).swaps) == []
    service = ServerService(engine, tmp_path, swaps=swaps)
    log = as_log(swap_run("grpc-run", good_source))
    (committed,) = await service.handle(log[-1], log)
    assert isinstance(committed, pb.SwapCommitted), committed

    swaps = (await admin.ListSwaps(ipb.ListSwapsRequest())).swaps
    assert [(s.swap_id, s.state, s.modules_patched) for s in swaps] == [(committed.swap_id, "committed", 5)]
    state = await admin.GetModuleState(ipb.ModuleStateRequest(class_path=QWEN_NORM))
    assert state.patched == 5 and state.active_swap_id == committed.swap_id
    assert (await admin.Health(ipb.HealthRequest())).active_swaps == 1
    (before,) = [s.calls for s in (await admin.ListSwaps(ipb.ListSwapsRequest())).swaps]
    assert before == 0  # the commit's own parity and canary calls are not live traffic
    chunks = await _generate(channel, prompt="Hello", max_new_tokens=4)  # serving through the kernel
    assert sum(len(c.token_ids) for c in chunks) == 4 and chunks[-1].done
    (served,) = [s.calls for s in (await admin.ListSwaps(ipb.ListSwapsRequest())).swaps]
    assert served > before  # every patched module's call of every step, counted by the swap's handle

    request = pb.RollbackRequested(swap_id=committed.swap_id, reason="test")
    trigger = ev.Recorded(99, ev.make_envelope("grpc-run", request, producer="test", time_ns=1, event_id="rb"))
    (rolled,) = await service.handle(trigger, [*log, trigger])
    assert rolled.observed.modules_matched == 5
    swaps = (await admin.ListSwaps(ipb.ListSwapsRequest())).swaps
    assert [(s.swap_id, s.state, s.calls) for s in swaps] == [(committed.swap_id, "rolled_back", served)]
    assert (await admin.GetModuleState(ipb.ModuleStateRequest(class_path=QWEN_NORM))).patched == 0


@pytest.fixture
async def guarded(engine, swaps):
    server, port = await start_grpc(engine, "127.0.0.1:0", admin_token="s3cret", swaps=swaps)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        yield ch, f"127.0.0.1:{port}"
    await server.stop(0)


async def test_yantra_swaps_shows_the_calls_the_live_server_counted(
    engine, swaps, guarded, own_bus, own_nats, good_source, tmp_path
):
    channel, addr = guarded
    service = ServerService(engine, tmp_path, swaps=swaps)
    envelopes = swap_run("grpc-calls", good_source)
    log = as_log(envelopes)
    (committed,) = await service.handle(log[-1], log)
    commit = ev.make_envelope("grpc-calls", committed, producer="server", time_ns=9, causation_id=log[-1].env.event_id)
    for env in (*envelopes, commit):
        await own_bus.publish(env)
    assert await _tokens(channel, prompt="Hello", max_new_tokens=4) == 4
    (calls,) = [r.calls for r in swaps.records()]
    assert calls > 0
    try:
        settings = {"NATS_URL": own_nats.url, "YANTRA_SERVER_ADDR": addr, "YANTRA_ADMIN_TOKEN": "s3cret"}
        listed = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "services.cli", "swaps"],
            cwd=ROOT,
            env={**os.environ, **settings},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr
        (line,) = [x for x in listed.stdout.splitlines() if x.startswith(committed.swap_id)]
        assert "server: committed" in line and "author: template" in line and "verdict: +1 untimed" in line
        assert line.endswith(f"calls: {calls}") and "missing" not in listed.stdout
        # where it serves, as its SwapCommitted recorded it: judged untimed on a CPU, every call of this eager server
        lines = listed.stdout.splitlines()
        serves = lines[lines.index(line) + 1]
        assert serves == (
            "    serves: eager: kernel at every row count (untimed: served wherever its correctness was judged); "
            "0 calls answered by the module's own forward"
        ), serves
    finally:
        request = pb.RollbackRequested(swap_id=committed.swap_id, reason="test")
        trigger = ev.Recorded(99, ev.make_envelope("grpc-calls", request, producer="test", time_ns=1, event_id="rb"))
        await service.handle(trigger, [*log, trigger])


async def test_with_an_admin_token_the_admin_rpcs_need_it_but_health_and_generation_do_not(engine, swaps, guarded):
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
    assert list((await admin.ListSwaps(ipb.ListSwapsRequest(), metadata=metadata("s3cret"))).swaps) == (swaps.records())
    assert (await admin.Health(ipb.HealthRequest())).ready  # probes need no secret
    assert await _tokens(channel, prompt="Hello", max_new_tokens=2) == 2  # the public surface


async def test_the_profilers_client_and_the_cli_send_the_token(engine, swaps, guarded):
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
    assert await list_swaps(addr, "s3cret") == swaps.records()


async def _health_of(addr: str) -> ipb.HealthReply:
    async with grpc.aio.insecure_channel(addr) as ch:  # a new connection each time
        return await ipb_grpc.AdminStub(ch).Health(ipb.HealthRequest(), timeout=5)


async def test_a_second_server_cannot_share_the_port_of_a_first(engine):
    first, port = await start_grpc(engine, "127.0.0.1:0", instance_id="first")
    addr = f"127.0.0.1:{port}"
    try:
        with pytest.raises(AddressUnavailable) as err:  # with SO_REUSEPORT both would listen, taking turns
            await start_grpc(engine, addr, instance_id="second")
        assert str(err.value) == (
            f"cannot listen on {addr}: another server holds that port; stop it, or set YANTRA_SERVER_ADDR to a free "
            "address"
        )
        assert [(await _health_of(addr)).instance_id for _ in range(8)] == ["first"] * 8
    finally:
        await first.stop(0)


async def test_a_port_held_by_any_listener_is_refused_and_a_free_one_is_not(engine):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        addr = f"127.0.0.1:{holder.getsockname()[1]}"
        assert "another server holds that port" in address_problem(addr)
        with pytest.raises(AddressUnavailable, match="another server holds that port"):
            await start_grpc(engine, addr)
    assert address_problem(addr) is None  # let go: free again


# Serialized bodies protobuf Python refuses to build: a string field (1 in every request here) with bytes that
# are not UTF-8, or a length that runs past the end of the body.
NOT_UTF8 = b"\x0a\x02\xff\xfe\x10\x04"  # field 1 = b"\xff\xfe", field 2 = 4
TRUNCATED = b"\x0a\x05ab"


async def _raw_call(channel, method: str, body: bytes, metadata=()):
    """`method` called with `body` as it is on the wire (no serializer), the reply left undecoded."""
    if method.endswith("/Generate"):
        return [chunk async for chunk in channel.unary_stream(method)(body, metadata=metadata)]
    return await channel.unary_unary(method)(body, metadata=metadata)


@pytest.mark.parametrize(
    ("method", "body"),
    [
        ("/yantra.v1.Inference/Generate", NOT_UTF8),
        ("/yantra.v1.Inference/Generate", TRUNCATED),
        ("/yantra.v1.Admin/Health", TRUNCATED),
        ("/yantra.v1.Admin/CaptureProfile", NOT_UTF8),
        ("/yantra.v1.Admin/MeasureDecode", NOT_UTF8),
        ("/yantra.v1.Admin/GetModuleState", NOT_UTF8),
        ("/yantra.v1.Admin/ListSwaps", TRUNCATED),
    ],
    ids=lambda value: (
        value.rsplit("/", 1)[-1] if isinstance(value, str) else "not-utf8" if value == NOT_UTF8 else "truncated"
    ),
)
async def test_a_body_that_does_not_decode_is_invalid_argument_on_every_rpc(channel, method, body):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await _raw_call(channel, method, body)
    name = method.rsplit("/", 1)[1]
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value
    assert err.value.details().startswith(f"{name}: cannot decode the request (") and "UTF-8" in err.value.details()
    assert await _tokens(channel, prompt="Hello", max_new_tokens=2) == 2  # and the server serves on


async def test_an_undecodable_admin_body_still_needs_the_token_first(guarded):
    from services.core.admin_auth import metadata

    channel, _ = guarded
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await _raw_call(channel, "/yantra.v1.Admin/MeasureDecode", NOT_UTF8)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await _raw_call(channel, "/yantra.v1.Admin/MeasureDecode", NOT_UTF8, metadata("s3cret"))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "UTF-8" in err.value.details()


async def test_max_new_tokens_errors_name_the_models_real_bound(engine, channel):
    prompt_tokens = len(engine.encode("hi"))
    bound = f"max_new_tokens must be 1..{512 - prompt_tokens} for a prompt of {prompt_tokens} tokens"
    for too_many in (0, 600, 4097):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await _generate(channel, prompt="hi", max_new_tokens=too_many)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        why = "prompt + new tokens must fit the model's 512 positions"
        assert err.value.details() == f"{bound} ({why}), got {too_many}"
    assert await _tokens(channel, prompt="hi", max_new_tokens=512 - prompt_tokens) > 0  # the bound is fine

    admin = ipb_grpc.AdminStub(channel)
    longest = len(engine.encode("a longer prompt"))
    for rpc, request in (
        (admin.CaptureProfile, ipb.CaptureProfileRequest(prompts=["hi", "a longer prompt"], max_new_tokens=5000)),
        (admin.MeasureDecode, ipb.MeasureDecodeRequest(prompts=["hi", "a longer prompt"], max_new_tokens=500)),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await rpc(request)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert f"max_new_tokens must be 1..{512 - longest} for a prompt of {longest} tokens" in err.value.details()
        assert "512 positions" in err.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await _generate(channel, token_ids=[1] * 512, max_new_tokens=1)
    assert err.value.details() == "the prompt's 512 tokens leave no room in the model's 512 positions"


async def test_a_full_server_answers_resource_exhausted_and_takes_requests_again_after(engine, channel):
    stub = ipb_grpc.InferenceStub(channel)
    engine.max_active = 1
    try:
        long = stub.Generate(ipb.GenerateRequest(prompt="Hello", max_new_tokens=64))
        first = await long.read()  # the first request is being generated
        assert first.token_ids and engine.active == 1
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await _generate(channel, prompt="Hi", max_new_tokens=2)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "retry later" in err.value.details()
        long.cancel()  # the client goes away: its slot is freed
        for _ in range(100):
            if engine.active == 0:
                break
            await asyncio.sleep(0.05)
        assert engine.active == 0
        assert await _tokens(channel, prompt="Hi", max_new_tokens=2) == 2
    finally:
        engine.max_active = 64


async def test_a_deadline_ends_the_generation_on_the_server_too(engine, channel):
    stub = ipb_grpc.InferenceStub(channel)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        # 500 steps of the tiny model take ~0.5 s or more even batched: far past a 0.1 s deadline
        request = ipb.GenerateRequest(prompt="Hello", max_new_tokens=500, ignore_eos=True)
        async for _ in stub.Generate(request, timeout=0.1):
            pass
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    for _ in range(100):  # the server stops generating for a caller that gave up
        if engine.active == 0:
            break
        await asyncio.sleep(0.05)
    assert engine.active == 0


async def test_standard_health_and_reflection_answer(channel):
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    health = health_pb2_grpc.HealthStub(channel)
    for name in ("", "yantra.v1.Inference", "yantra.v1.Admin"):
        reply = await health.Check(health_pb2.HealthCheckRequest(service=name))
        assert reply.status == health_pb2.HealthCheckResponse.SERVING, name
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await health.Check(health_pb2.HealthCheckRequest(service="nope"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    [answer] = [r async for r in stub.ServerReflectionInfo(iter([request]))]
    names = {s.name for s in answer.list_services_response.service}
    assert {"yantra.v1.Inference", "yantra.v1.Admin", "grpc.health.v1.Health"} <= names


async def test_generate_samples_with_a_seed_stops_at_a_stop_string_and_says_why_it_ended(engine, channel):
    sampled = dict(prompt="Hello", max_new_tokens=12, temperature=1.2, top_p=0.95, seed=11, ignore_eos=True)
    first, again = await _generate(channel, **sampled), await _generate(channel, **sampled)
    tokens = [t for c in first for t in c.token_ids]
    assert tokens == [t for c in again for t in c.token_ids] and len(tokens) == 12
    assert first[-1].finish_reason == "length"
    text = "".join(c.text for c in first)
    stop = text[3:5] if len(text) >= 5 else text[-1:]
    outcomes = Outcomes()
    engine.stats.observers.append(outcomes)
    try:
        cut = await _generate(channel, **sampled, stop=[stop])
    finally:
        engine.stats.observers.remove(outcomes)
    assert cut[-1].done and cut[-1].finish_reason == "stop"
    assert "".join(c.text for c in cut) == text[: text.index(stop)]
    assert outcomes.seen == ["ok"]  # ended by its stop string: answered, not a client that went


@pytest.mark.parametrize(
    ("request_", "why"),
    [
        ({"stop": [""]}, "stop sequence is empty"),  # temperature and top_p out of range: the test below
    ],
)
async def test_bad_sampling_arguments_are_invalid_argument(channel, request_, why):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await _generate(channel, prompt="hi", max_new_tokens=4, **request_)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and why in err.value.details()


async def test_a_body_past_grpcs_receive_limit_is_resource_exhausted_and_takes_no_slot(engine, channel):
    """The OpenAI API's other bad inputs over gRPC are below (there is no model name to get wrong, and a body is
    protobuf); a body past gRPC's 4 MiB receive limit is refused by gRPC itself, naming both sizes."""
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await _generate(channel, prompt="x" * 5_000_000, max_new_tokens=4)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "Received message larger than max (5000007 vs. 4194304)" in err.value.details()
    assert engine.active == 0 and await _tokens(channel, prompt="Hello", max_new_tokens=2) == 2


NAN, INF = float("nan"), float("inf")


# The OpenAI API's bad inputs over gRPC, each answered as the HTTP API answers it (tests/server/test_http_api.py).
# A negative max_new_tokens cannot be sent: the field is a uint32 (protobuf refuses it in the client).
@pytest.mark.parametrize(
    ("request_", "says"),
    [
        (
            {"prompt": "x" * 600, "max_new_tokens": 4},
            "the prompt's 600 tokens leave no room in the model's 512 positions",
        ),
        ({"prompt": "hi", "max_new_tokens": 0}, "max_new_tokens must be 1..510"),
        ({"prompt": "hi", "max_new_tokens": 2**32 - 1}, "max_new_tokens must be 1..510"),  # the most uint32 holds
        (
            {"prompt": "hi", "max_new_tokens": 4, "temperature": -0.5},
            "temperature must be 0..100 (0 = greedy), got -0.5",
        ),
        ({"prompt": "hi", "max_new_tokens": 4, "temperature": NAN}, "temperature must be 0..100 (0 = greedy), got nan"),
        ({"prompt": "hi", "max_new_tokens": 4, "temperature": INF}, "temperature must be 0..100 (0 = greedy), got inf"),
        ({"prompt": "hi", "max_new_tokens": 4, "temperature": 1, "top_p": 1.5}, "top_p must be in (0, 1], got 1.5"),
        ({"prompt": "hi", "max_new_tokens": 4, "temperature": 1, "top_p": -0.25}, "top_p must be in (0, 1], got -0.25"),
        ({"prompt": "hi", "max_new_tokens": 4, "top_p": NAN}, "top_p must be in (0, 1], got nan"),
    ],
)
async def test_bad_input_is_invalid_argument_in_one_line_and_the_next_request_is_served(
    engine, channel, request_, says
):
    """Each refusal names the field and its limit, holds no slot, and the request after it is served."""
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await _generate(channel, **request_)
    details = err.value.details()
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and says in details, details
    assert "\n" not in details and "Traceback" not in details
    assert engine.active == 0
    assert await _tokens(channel, prompt="hi", max_new_tokens=3) == 3
