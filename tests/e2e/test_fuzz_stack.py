"""A careless or hostile operator against the running stack: whatever reaches the bus or the APIs, a run completes.

hypothesis draws what lands on the run log's subjects (bytes of any size up to the server's limit, envelopes whose run
id disagrees with their subject, RunRequested of absurd sizes and fields, truncated and unknown events) and what the
gRPC APIs are sent (MeasureDecode and CaptureProfile of thousands of prompts, Generate prompts past every bound).
It runs for a bounded number of examples against every service as a process; then an ordinary run must complete,
`yantra runs` must list it, every service must still be alive, and every API call must have been answered promptly.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import grpc
import pytest
from e2e_stack import request, services_alive, yantra_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from runlog import has, wait_for_log

from services.core import events as ev
from services.core.admin_auth import metadata
from services.core.pb import events_pb2 as pb
from services.core.pb import inference_pb2 as ipb
from services.core.pb import inference_pb2_grpc as igrpc
from services.core.server_client import wait_ready

pytestmark = pytest.mark.e2e
EXAMPLES = 30
API_DEADLINE_S = 20.0  # a refusal is immediate; a call still running past this is unbounded work let in
RUN_TIMEOUT_S = 300

run_ids = st.text("abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=1, max_size=20)
types = st.sampled_from([*ev.RUN_EVENT_NAMES, "Nonsense", "RunRequested"])
texts = st.text(max_size=200)


@st.composite
def absurd_request(draw) -> pb.RunRequested:
    """A RunRequested past at least one bound a run has (prompt count, length, decode tokens, candidates,
    targets), its other fields anything."""
    which = draw(st.sampled_from(["prompts", "long", "tokens", "candidates", "targets", "empty"]))
    prompts = draw(st.lists(texts.filter(bool), min_size=1, max_size=4))
    msg = pb.RunRequested(
        model=draw(texts), requested_by=draw(texts), prompts=prompts, decode_tokens=draw(st.integers(1, 16))
    )
    if which == "prompts":
        msg.prompts[:] = ["hello"] * draw(st.integers(17, 6000))
    elif which == "long":
        msg.prompts.append("x" * draw(st.integers(4001, 200_000)))
    elif which == "tokens":
        msg.decode_tokens = draw(st.integers(257, 2**32 - 1))
    elif which == "candidates":
        msg.max_candidates = draw(st.integers(33, 2**32 - 1))
    elif which == "targets":
        msg.max_targets = draw(st.integers(17, 2**32 - 1))
    else:
        msg.prompts.append("")
    return msg


@st.composite
def poison(draw) -> tuple[str, bytes]:
    """(subject, bytes) for the run log: garbage, oversized, truncated, mismatched or absurd."""
    run_id, type_name = draw(run_ids), draw(types)
    subject = f"yantra.run.{run_id}.{type_name}"
    kind = draw(st.sampled_from(["bytes", "big", "mismatched", "absurd", "truncated"]))
    if kind == "bytes":
        return subject, draw(st.binary(max_size=2000))
    if kind == "big":  # up to the server's 1 MiB payload: the stream, the consumers and the DLQ meet it
        return subject, draw(st.binary(min_size=1, max_size=64)) * draw(st.integers(1000, 15_000))
    env = ev.make_envelope(
        draw(run_ids), draw(absurd_request()), producer="fuzz", time_ns=time.time_ns(), event_id=uuid.uuid4().hex
    )
    data = ev.encode(env)
    if kind == "mismatched":  # a valid envelope of one run on another run's subject
        return f"yantra.run.{env.run_id}x.RunRequested", data
    if kind == "truncated":
        return f"yantra.run.{env.run_id}.RunRequested", data[: draw(st.integers(0, max(0, len(data) - 1)))]
    return f"yantra.run.{env.run_id}.RunRequested", data


async def _publish_raw(bus, subject: str, data: bytes) -> None:
    try:
        await bus.js.publish(subject, data, timeout=10.0)
    except Exception:  # refused by the server (too large for the stream, say): it never entered, which is fine
        pass


async def _api_abuse(addr: str, token: str) -> list[str]:
    """Unbounded work asked of the APIs: each must be refused (or answered) within API_DEADLINE_S."""
    problems = []
    async with grpc.aio.insecure_channel(addr, options=[("grpc.max_send_message_length", 64 << 20)]) as channel:
        admin, inference = igrpc.AdminStub(channel), igrpc.InferenceStub(channel)
        calls = [
            ("MeasureDecode 10,000 prompts", admin.MeasureDecode(
                ipb.MeasureDecodeRequest(prompts=["hello"] * 10_000, max_new_tokens=8, repeats=3),
                timeout=API_DEADLINE_S, metadata=metadata(token))),
            ("CaptureProfile 5,000 prompts", admin.CaptureProfile(
                ipb.CaptureProfileRequest(prompts=["hi"] * 5000, max_new_tokens=4),
                timeout=API_DEADLINE_S, metadata=metadata(token))),
            ("MeasureDecode a 1 MB prompt", admin.MeasureDecode(
                ipb.MeasureDecodeRequest(prompts=["y" * (1 << 20)], max_new_tokens=4),
                timeout=API_DEADLINE_S, metadata=metadata(token))),
        ]  # fmt: skip
        for what, call in calls:
            try:
                await call
                problems.append(f"{what}: answered, not refused")
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.INVALID_ARGUMENT:
                    problems.append(f"{what}: {exc.code().name}: {exc.details()}")
        try:
            stream = inference.Generate(ipb.GenerateRequest(prompt="z" * (1 << 20), max_new_tokens=4), timeout=20)
            async for _ in stream:
                pass
            problems.append("Generate of a 1 MB prompt: answered, not refused")
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.INVALID_ARGUMENT:
                problems.append(f"Generate of a 1 MB prompt: {exc.code().name}: {exc.details()}")
    return problems


async def test_the_stack_completes_a_run_after_whatever_the_bus_and_the_apis_were_sent(stack, own_bus):
    bus, settings_ = own_bus, stack.settings
    await wait_ready(settings_.server_addr, timeout=120, still_starting=lambda: stack.procs["server"].poll() is None)
    alive = services_alive(stack)
    drawn: list[tuple[str, bytes]] = []

    @settings(
        max_examples=EXAMPLES, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck)
    )
    @given(poison())
    def collect(item):
        drawn.append(item)

    collect()
    loop_started = time.monotonic()
    for subject, data in drawn:
        await _publish_raw(bus, subject, data)
    problems = await _api_abuse(settings_.server_addr, settings_.admin_token)
    assert not problems, problems
    assert time.monotonic() - loop_started < 4 * API_DEADLINE_S + 60

    # An ordinary run, requested after all of it: it completes, and every reader of the log survives the log.
    run_id = f"e2e-after-fuzz-{uuid.uuid4().hex[:6]}"
    await request(bus, run_id, prompts=["Hello there"], decode_tokens=4, max_candidates=1)
    log = await wait_for_log(bus, run_id, has("RunCompleted"), RUN_TIMEOUT_S, check=alive)
    assert ev.last(log, "RunCompleted") is not None
    alive()
    yantra = yantra_for(stack)
    runs = yantra("runs")
    assert runs.returncode == 0, runs.stderr
    assert any(line.startswith(run_id) for line in runs.stdout.splitlines()), runs.stdout
    events = yantra("events", "--run", run_id)
    assert events.returncode == 0, events.stderr
    assert yantra("replay", run_id, "--verify").returncode == 0
    await asyncio.sleep(0)  # nothing left pending on the loop
