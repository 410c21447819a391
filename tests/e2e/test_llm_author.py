"""A run whose kernels an LLM writes (`--author gemini`), every service its own process, the model a local endpoint.

The endpoint speaks Gemini's REST shape on 127.0.0.1 and answers the committed good row_reduction kernel (for
another family's target: the prompt's own reference, i.e. that family's template). The run must reach a judged
candidate of origin "llm", record the answer, and `yantra replay RUN --verify` must pass with the endpoint
stopped: replay never asks the model. The API key never lands in the log.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest
from e2e_stack import request, running_stack, services_alive, yantra_for
from runlog import has, wait_for_log

from services.core import events as ev
from services.core.server_client import wait_ready

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "coder"))
from llm_endpoint import Answer, LlmEndpoint, answer_text, reference_answer  # noqa: E402

pytestmark = pytest.mark.e2e
KEY = "e2e-gemini-key-" + uuid.uuid4().hex


def _answer(req):
    """The committed good kernel for a row_reduction target, the family's reference for any other."""
    if "(op family row_reduction," in req.prompt:
        return Answer(answer_text("good_row_reduction.json"))
    return reference_answer(req)


@pytest.fixture
def endpoint():
    server = LlmEndpoint(responder=_answer).start()
    yield server
    server.stop()


@pytest.fixture
def llm_stack(own_nats, tmp_path, endpoint, monkeypatch):
    monkeypatch.setenv("GEMINI_API_KEY", KEY)  # the services inherit the environment; only the coder reads it
    yield from running_stack(own_nats, tmp_path, llm_base_url=endpoint.url, llm_model="gemini-e2e", llm_timeout_s=20.0)


async def test_a_gemini_authored_run_is_judged_and_replays_without_the_endpoint(llm_stack, own_bus, endpoint):
    stack = llm_stack
    await wait_ready(
        stack.settings.server_addr, timeout=120, still_starting=lambda: stack.procs["server"].poll() is None
    )
    run_id = "llm-" + uuid.uuid4().hex[:8]
    await request(own_bus, run_id, author="gemini", max_candidates=1, prompts=["Hello there"], decode_tokens=4)
    log = await wait_for_log(own_bus, run_id, has("RunCompleted"), 150, check=services_alive(stack))

    proposed = ev.first(log, "CandidateProposed").msg
    judged = ev.first(log, "CandidateJudged").msg
    assert proposed.origin == "llm" and proposed.observed.provider == "gemini"
    assert proposed.observed.model == "gemini-e2e" and proposed.observed.http_status == 200
    assert judged.candidate_id == proposed.candidate_id and judged.reward >= 1, judged.reason
    assert endpoint.requests and all(r.path == "/v1beta/models/gemini-e2e:generateContent" for r in endpoint.requests)
    assert all(KEY.encode() not in r.env.SerializeToString() for r in log)

    endpoint.stop()  # replay must need nothing but the log
    asked = len(endpoint.requests)
    replay = yantra_for(stack)("replay", run_id, "--verify")
    assert replay.returncode == 0 and "replay verified" in replay.stdout, replay.stdout + replay.stderr
    assert len(endpoint.requests) == asked
    endpoint.start()  # for the fixture's stop
