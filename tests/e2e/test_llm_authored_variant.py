"""An LLM author swaps a kernel no template writes: GPT-NeoX's MLP (`tiny-gptneox`), whose activation is torch's exact
GELU (plain_mlp's `mlp_gelu`), every service its own process, the model a local endpoint speaking Gemini's REST shape.

The run's profile offers the MLP because the run's author is an LLM (its recorded catalogue is every variant the
families judge); the endpoint answers the MLP's question with the committed mlp_gelu kernel and every other target's
with the prompt's own reference (that family's template). The MLP's kernel is judged, swapped with the model's tokens
unchanged, and `yantra replay RUN --verify` passes with the endpoint stopped: replay never asks the model.
"""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path

import pytest
from e2e_stack import CPU_POLICY, services_alive, yantra_for
from runlog import has, wait_for_log

from services.core import events as ev
from services.core.nats_launcher import free_port
from services.core.pb import events_pb2 as pb
from services.core.server_client import wait_ready
from services.core.settings import Settings
from services.core.stack import start_stack
from services.registry import SERVICES

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "coder"))
from llm_endpoint import Answer, LlmEndpoint, answer_text, reference_answer  # noqa: E402

pytestmark = pytest.mark.e2e
PRESET = "tiny-gptneox"
MLP = "transformers.models.gpt_neox.modeling_gpt_neox.GPTNeoXMLP"
KEY = "e2e-gemini-key-" + uuid.uuid4().hex


def _answer(req):
    """The committed mlp_gelu kernel for the plain MLP's question; any other target's family reference."""
    if "(op family plain_mlp, variant mlp_gelu)" in req.prompt:
        return Answer(answer_text("good_plain_mlp_gelu.json"))
    return reference_answer(req)


@pytest.fixture
def endpoint():
    server = LlmEndpoint(responder=_answer).start()
    yield server
    server.stop()


@pytest.fixture
def neox_stack(own_nats, tmp_path, endpoint, monkeypatch):
    """The five services as processes serving tiny-gptneox on CPU, the coder's Gemini author pointed at `endpoint`."""
    monkeypatch.setenv("GEMINI_API_KEY", KEY)  # the services inherit the environment; only the coder reads it
    settings = Settings(
        nats_url=own_nats.url, data_dir=tmp_path / "data", server_addr=f"127.0.0.1:{free_port()}", model=PRESET,
        device="cpu", ack_wait_s=4.0, log_level="INFO", admin_token="e2e-" + uuid.uuid4().hex,
        llm_base_url=endpoint.url, llm_model="gemini-e2e", llm_timeout_s=20.0,
    )  # fmt: skip
    stack = start_stack(settings, SERVICES)
    yield stack
    stack.stop()
    for name in SERVICES:  # shown by pytest only when the test fails
        print(f"----- {name} log -----\n{stack.log_tail(name, 40)}")


async def _request(bus, run_id: str) -> None:
    """The MLP alone (by its class: it need not rank first), one candidate, by the Gemini author."""
    msg = pb.RunRequested(
        model=PRESET, policy=CPU_POLICY, max_candidates=1, only_targets=[MLP], author="gemini", prompts=["Hello there"],
        decode_tokens=4, requested_by="e2e",
    )  # fmt: skip
    env = ev.make_envelope(run_id, msg, producer="test", time_ns=time.time_ns(), event_id=f"req-{run_id}")
    await bus.publish(env)


async def test_the_gemini_author_swaps_gptneoxs_exact_gelu_and_the_run_replays_without_the_endpoint(
    neox_stack, own_bus, endpoint
):
    stack = neox_stack
    await wait_ready(
        stack.settings.server_addr, timeout=120, still_starting=lambda: stack.procs["server"].poll() is None
    )
    run_id = "llm-variant-" + uuid.uuid4().hex[:8]
    await _request(own_bus, run_id)
    log = await wait_for_log(own_bus, run_id, has("RunCompleted"), 480, check=services_alive(stack))

    profiled = ev.first(log, "ProfileCaptured").msg
    assert list(profiled.targets) == [MLP], profiled.reason
    plain = {c.family: list(c.writable) for c in profiled.observed.catalogue}["plain_mlp"]
    assert "mlp_gelu" in plain  # the LLM author's catalogue, recorded in the profile
    [proposed] = [r.msg for r in log if r.type == "CandidateProposed" and r.msg.target_class == MLP]
    assert proposed.origin == "llm" and proposed.plan.family == "plain_mlp" and "tl.erf(" in proposed.source
    assert proposed.observed.provider == "gemini" and proposed.observed.http_status == 200
    [judged] = [r.msg for r in log if r.type == "CandidateJudged" and r.msg.candidate_id == proposed.candidate_id]
    assert judged.reward >= 1, judged.reason
    [committed] = [r.msg for r in log if r.type == "SwapCommitted" and r.msg.target_class == MLP]
    assert committed.candidate_id == proposed.candidate_id and committed.modules_patched > 0
    assert committed.tokens_equal, committed
    assert all(KEY.encode() not in r.env.SerializeToString() for r in log)

    endpoint.stop()  # replay must need nothing but the log
    asked = len(endpoint.requests)
    replay = yantra_for(stack)("replay", run_id, "--verify")
    assert replay.returncode == 0 and "replay verified" in replay.stdout, replay.stdout + replay.stderr
    assert len(endpoint.requests) == asked
    endpoint.start()  # for the fixture's stop
