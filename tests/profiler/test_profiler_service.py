"""The profiler service over a real nats-server, asking a real grpc.aio Admin server that profiles a real model."""

from __future__ import annotations

import asyncio
import statistics
import time

import grpc
import pytest
import torch
from runlog import has, publish
from transformers import Qwen2Config, Qwen2ForCausalLM

from services.core import events as ev
from services.core import run_end
from services.core.bus import Bus
from services.core.nats_launcher import free_port
from services.core.pb import events_pb2 as pb
from services.core.pb import inference_pb2 as ipb
from services.core.pb import inference_pb2_grpc as igrpc
from services.core.replay import verify
from services.core.runner import answer
from services.profiler import domain
from services.profiler.adapters import AdminCallFailed, AdminClient, ServerUnreachable
from services.profiler.service import ProfilerService

NORM = "transformers.models.qwen2.modeling_qwen2.Qwen2RMSNorm"
VOCAB = 128


def _ids(prompt: str) -> torch.Tensor:
    return torch.tensor([[b % VOCAB for b in prompt.encode()][:32] or [1]])


class TinyAdmin(igrpc.AdminServicer):
    """CaptureProfile and MeasureDecode over a tiny random-weight Qwen2, profiled with forward hooks."""

    def __init__(self, class_profiler):
        torch.manual_seed(0)
        cfg = Qwen2Config(
            vocab_size=VOCAB,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=256,
        )
        self.model = Qwen2ForCausalLM(cfg).eval()
        self.class_profiler = class_profiler
        self.measures = 0
        self.captures = 0

    def _decode(self, prompts: list[str], tokens: int) -> tuple[float, int, float]:
        generated, start = 0, time.perf_counter()
        with torch.no_grad():
            for prompt in prompts:
                ids = _ids(prompt)
                out = self.model.generate(
                    ids, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, pad_token_id=0
                )
                generated += out.shape[1] - ids.shape[1]
        seconds = time.perf_counter() - start
        return generated / seconds, generated, seconds

    def _capture(self, prompts: list[str], tokens: int) -> ipb.CaptureProfileReply:
        before, _, _ = self._decode(prompts, tokens)
        start = time.perf_counter()
        with self.class_profiler(self.model) as prof:
            _, generated, _ = self._decode(prompts, tokens)
        captured_us = (time.perf_counter() - start) * 1e6
        obs = pb.ProfileObservation(
            model="tiny-qwen2",
            dtype="float32",
            hardware=pb.HardwareFigures(device="cpu", device_name="test", peak_bytes_per_s=20e9, peak_flops=2e11),
            modules=prof.results(),
            captured_time_us=captured_us,
            decode_tokens_per_s=before,
            tokens_generated=generated,
            requests=len(prompts),
            time_source="host_clock",
        )
        return ipb.CaptureProfileReply(observation=obs)

    async def CaptureProfile(self, request, context):
        self.captures += 1
        if not request.prompts:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "no prompts to profile")
        positions = self.model.config.max_position_embeddings
        if request.max_new_tokens >= positions:  # as the real server's Engine.check refuses it
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"{request.max_new_tokens} new tokens exceed the model's {positions}"
            )
        return await asyncio.to_thread(self._capture, list(request.prompts), request.max_new_tokens)

    async def MeasureDecode(self, request, context):
        self.measures += 1
        runs = [self._decode(list(request.prompts), request.max_new_tokens) for _ in range(max(request.repeats, 1))]
        return ipb.MeasureDecodeReply(
            tokens_per_s=statistics.median(r[0] for r in runs),
            tokens_generated=sum(r[1] for r in runs),
            seconds=sum(r[2] for r in runs),
        )


@pytest.fixture
async def admin_server(class_profiler):
    server = grpc.aio.server()
    servicer = TinyAdmin(class_profiler)
    igrpc.add_AdminServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield f"127.0.0.1:{port}", servicer
    await server.stop(grace=None)


@pytest.fixture
async def profiler(nats_server, admin_server, run_id):
    """The service consuming this test's runs only (the session's nats-server is shared), on its own connection."""
    addr, _ = admin_server
    admin = AdminClient(addr)
    service = ProfilerService(admin, repeats=1)
    runs = [run_id, run_id + "b", run_id + "c", run_id + "d", run_id + "e", run_id + "f"]
    stop = asyncio.Event()
    subjects = [ev.run_filter(r, t) for r in runs for t in service.consumes]
    service_bus = await Bus.connect(nats_server.url, name="profiler-test")

    async def on_message(rec: ev.Recorded) -> None:
        await answer(service_bus, service, rec)

    task = asyncio.create_task(service_bus.consume(f"profiler-{run_id}", subjects, on_message, stop, ack_wait=10))
    yield runs
    stop.set()
    await task
    await admin.close()
    # close, not drain: Bus.close() drains, and a pull subscription left holding an expired fetch's
    # status message makes drain wait its full 30 s timeout (reported to the lead)
    await service_bus.nc.close()


INJECTED = ("TargetConcluded", "SwapCommitted", "RollbackRequested", "SwapRolledBack")
AS_RECORDED = {t: (lambda prior, trigger, recorded, ordinal=0: recorded) for t in INJECTED}


async def test_profile_then_no_swap(bus, profiler, admin_server, wait_log):
    run_id = profiler[0]
    await publish(bus, run_id, pb.RunRequested(prompts=["Hello there"], decode_tokens=4), "client")
    log = await wait_log(bus, run_id, has("ProfileCaptured"))
    profiled = ev.first(log, "ProfileCaptured")
    msg: pb.ProfileCaptured = profiled.msg
    assert msg.target_class == NORM, msg.reason
    assert msg.observed.decode_tokens_per_s > 0 and msg.observed.tokens_generated == 4
    names = {t.class_path.rsplit(".", 1)[-1] for t in msg.ranking}
    assert {"Qwen2RMSNorm", "Linear", "Embedding"} <= names
    assert "chose row_reduction class Qwen2RMSNorm" in msg.reason
    # which ranks first, a Linear or the norm, is the host's timing's call (on a loaded CPU the norm can): the
    # reason says a matmul outranked the choice exactly when one did
    top = msg.ranking[0].fingerprint.op_family
    assert msg.reason.startswith("matmul ranks first") == (top == "matmul"), (top, msg.reason)
    first = f"it ranks first of {len(msg.ranking)} leaf classes"
    assert msg.reason.endswith(first) == (top == "row_reduction"), (top, msg.reason)
    assert "Qwen2DecoderLayer" not in names and "Qwen2ForCausalLM" not in names  # containers are not ranked
    families = {t.class_path.rsplit(".", 1)[-1]: t.fingerprint.op_family for t in msg.ranking}
    assert families["Qwen2RMSNorm"] == "row_reduction" and families["Linear"] == "matmul"
    assert families["Embedding"] == "gather"

    concluded = pb.TargetConcluded(target_class=NORM, reward=-1, swap=False, reason="no correct candidate")
    await publish(bus, run_id, concluded, "coder", profiled)
    log = await wait_log(bus, run_id, has("RunCompleted"))
    done: pb.RunCompleted = ev.last(log, "RunCompleted").msg
    assert (done.outcome, done.swapped, done.target_class, done.reward) == ("no_swap", False, NORM, -1)
    assert done.tokens_per_s_before == msg.observed.decode_tokens_per_s and done.tokens_per_s_after > 0
    assert done.speedup == pytest.approx(done.tokens_per_s_after / done.tokens_per_s_before)
    assert verify(log, {**domain.REDERIVE, **AS_RECORDED}) == []


async def test_swap_committed_completes_once_and_a_later_rollback_does_not(bus, profiler, admin_server, wait_log):
    run_id = profiler[1]
    _, servicer = admin_server
    await publish(bus, run_id, pb.RunRequested(prompts=[], decode_tokens=0), "client")  # defaults apply
    log = await wait_log(bus, run_id, has("ProfileCaptured"))
    profiled = ev.first(log, "ProfileCaptured")
    assert profiled.msg.observed.requests == len(domain.DEFAULT_PROMPTS)
    concluded = await publish(
        bus, run_id, pb.TargetConcluded(target_class=NORM, reward=2, swap=True), "coder", profiled
    )
    committed = pb.SwapCommitted(swap_id="s1", candidate_id="c1", target_class=NORM, modules_patched=5)
    await publish(bus, run_id, committed, "server", concluded)
    log = await wait_log(bus, run_id, has("RunCompleted"))
    done = ev.last(log, "RunCompleted").msg
    assert (done.outcome, done.swapped, done.reward) == ("swapped", True, 2)
    assert done.observed.tokens_generated == len(domain.DEFAULT_PROMPTS) * domain.DEFAULT_DECODE_TOKENS

    measured = servicer.measures
    asked = await publish(bus, run_id, pb.RollbackRequested(swap_id="s1", reason="operator"), "client")
    rolled = await publish(bus, run_id, pb.SwapRolledBack(swap_id="s1", candidate_id="c1"), "server", asked)
    await asyncio.sleep(1.0)  # give the consumer time to (not) answer it
    log = await bus.read_run(run_id)
    assert [r.type for r in log].count("RunCompleted") == 1 and log[-1].env.event_id == rolled.env.event_id
    assert servicer.measures == measured
    assert verify(log, {**domain.REDERIVE, **AS_RECORDED}) == []


async def test_unreachable_server_is_a_clear_error():
    addr = f"127.0.0.1:{free_port()}"
    client = AdminClient(addr, attempts=2, backoff_s=0.01, timeout_s=5)
    with pytest.raises(ServerUnreachable, match=f"inference server at {addr} did not answer CaptureProfile after 2"):
        await client.capture_profile(["hi"], 4)
    await client.close()


async def test_server_error_is_reported_not_retried(admin_server):
    addr, _ = admin_server
    client = AdminClient(addr, attempts=3, backoff_s=10)  # a retry would make this test time out
    with pytest.raises(AdminCallFailed, match="CaptureProfile .* failed: INVALID_ARGUMENT: no prompts to profile"):
        await client.capture_profile([], 4)
    await client.close()


async def test_a_request_that_can_never_be_measured_ends_the_run_at_once(bus, profiler, wait_log):
    """An empty prompt, or more tokens than the model has positions, ends the run with a RunFailed saying why,
    instead of failing every delivery and leaving the run 'running' for ever."""
    empty, too_long = profiler[2], profiler[3]
    await publish(bus, empty, pb.RunRequested(prompts=["Hello", ""], decode_tokens=4), "client")
    # within a run's limits (services.core.limits), beyond this model's 256 positions: the server's to refuse
    await publish(bus, too_long, pb.RunRequested(prompts=["Hello"], decode_tokens=256), "client")
    for run_id, why in ((empty, "prompt 2 of 2 is empty"), (too_long, "INVALID_ARGUMENT: 256 new tokens exceed")):
        log = await wait_log(bus, run_id, has("RunFailed"), 20)
        failed = ev.last(log, "RunFailed")
        assert failed.env.producer == "profiler" and failed.msg.failed_trigger == "RunRequested"
        assert failed.msg.reason.startswith("profiler could not answer RunRequested (refused it): ")
        assert why in failed.msg.reason, failed.msg.reason
        assert [r.type for r in log] == ["RunRequested", "RunFailed"]
        assert verify(log, {**domain.REDERIVE, **run_end.REDERIVE}) == []


async def test_a_run_asking_more_than_its_limits_fails_at_once_naming_the_limit_and_the_server_is_not_asked(
    bus, profiler, admin_server, wait_log
):
    """5,000 prompts (or any input past services.core.limits) ends the run with a RunFailed that names the limit,
    before the server is asked anything: such a request held the model for over ten minutes."""
    _, servicer = admin_server
    many, long_tokens = profiler[4], profiler[5]
    await publish(bus, many, pb.RunRequested(prompts=["Hello"] * 5000, decode_tokens=4), "client")
    await publish(bus, long_tokens, pb.RunRequested(prompts=["Hi"] * 16, decode_tokens=128), "client")
    for run_id, limit in ((many, "MAX_RUN_PROMPTS"), (long_tokens, "MAX_RUN_DECODE_TOKENS")):
        log = await wait_log(bus, run_id, has("RunFailed"), 20)
        assert [r.type for r in log] == ["RunRequested", "RunFailed"]
        reason = ev.last(log, "RunFailed").msg.reason
        assert (
            reason.startswith("profiler could not answer RunRequested (refused it): ") and f"(limits.{limit})" in reason
        )
        assert verify(log, {**domain.REDERIVE, **run_end.REDERIVE}) == []
    assert servicer.captures == 0
