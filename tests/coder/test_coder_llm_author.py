"""The LLM author: what it is asked, what each kind of answer becomes, and that replay needs no network.

Answers come from a local endpoint (llm_endpoint.py) speaking Gemini's REST shape and OpenAI's chat completions,
serving the committed answer set (llm_answers/): a good row_reduction kernel (the template's own, in the answer
format) and hostile ones. Each is recorded; each becomes a candidate the judge's static layer refuses, or a
recorded failure.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from coder_testkit import Log, profile_captured
from llm_endpoint import Answer, Blocked, LlmEndpoint, Slow, Status, answer_text

from services.coder import authors, domain, llm_answer
from services.coder.llm_providers import GeminiProvider, OpenAICompatibleProvider
from services.coder.service import CoderService
from services.core import events as ev
from services.core.candidate_check import check_candidate
from services.core.pb import events_pb2 as pb
from services.core.replay import verify
from services.ops.row_reduction import template as rmsnorm

KEY = "test-key-never-recorded-5f3a"
ROOT = Path(__file__).resolve().parents[2]


def _run(author: str = "gemini", max_candidates: int = 3) -> tuple[Log, object]:
    log = Log()
    policy = pb.SwapPolicy(min_reward=1, name="cpu-untimed", reason="test")
    log.append(pb.RunRequested(model="tiny-qwen2", policy=policy, max_candidates=max_candidates, author=author))
    captured = profile_captured()
    log.append(captured)
    skills = log.append(pb.SkillsRetrieved(target_class=captured.target_class))
    return log, skills


def _ask(author: str = "gemini") -> tuple[Log, authors.Ask]:
    log, skills = _run(author)
    [ask] = domain.decide(log.records, skills)
    return log, ask


def _observed(text: str, finish: str = "STOP", **fields) -> pb.AuthorObservation:
    return pb.AuthorObservation(provider="gemini", model="m", answer=text, finish_reason=finish, attempts=1, **fields)


# ---------------------------------------------------------------- the question


def test_a_template_run_is_decided_as_before_and_an_llm_run_asks():
    log, skills = _run(author="")
    assert all(
        isinstance(m, pb.CandidateProposed) and m.origin == "template" for m in domain.decide(log.records, skills)
    )
    log, ask = _ask()
    assert (ask.provider, ask.family, ask.attempt) == ("gemini", "row_reduction", 1)
    good = json.loads(answer_text("good_row_reduction.json"))
    assert json.dumps(good["source"]) in ask.prompt  # the reference, in the answer format
    for part in ("## The deployment contract", '"entrypoint": "rmsnorm"', "## Physics fingerprint", '"op_family"',
                 "## Live shapes", '"input_shape": [1, 5, 64]', "ARGS:", "GRIDS:", "candidate 1 of 3"):  # fmt: skip
        assert part in ask.prompt, part
    assert "host code" in ask.system.lower() and "@triton.jit" in ask.system


def test_verdicts_are_told_integrity_refusals_by_category_and_failures_verbatim():
    log, skills = _run(max_candidates=4)
    first = domain.answered(
        log.records, domain.decide(log.records, skills)[0], _observed(answer_text("host_code.json"))
    )
    proposed = log.append(first, skills)
    static = check_candidate(first.source, first.plan)
    assert not static.passed and static.findings[0].rule_id == "host-code"
    refused = pb.CandidateJudged(
        candidate_id=first.candidate_id, reward=-1, reason="static check failed: host-code: module level ...",
        observed=pb.JudgeObservation(static_check=static),
    )  # fmt: skip
    judged = log.append(refused, proposed)
    [ask] = domain.decide(log.records, judged)
    assert ask.attempt == 2 and "refused by the integrity checks (static check)" in ask.prompt
    assert "host-code" not in ask.prompt and "module level" not in ask.prompt  # the rule is not taught

    second = log.append(
        domain.answered(log.records, ask, _observed(answer_text("adversarial_fp16_maths.json"))), judged
    )
    error = "max rel err 3.1e-04 > rtol 1.3e-06 at (7, 64) float32"
    cor = pb.CorrectnessEvidence(passed=False, rule_id="tolerance", error=error)
    obs = pb.JudgeObservation(
        static_check=pb.StaticEvidence(passed=True), contract=pb.ContractEvidence(passed=True), correctness=cor
    )
    judged = log.append(pb.CandidateJudged(candidate_id=second.msg.candidate_id, reward=-1, observed=obs), second)
    [ask] = domain.decide(log.records, judged)
    assert f"failed correctness: tolerance: {error}" in ask.prompt and "_rms_kernel" in ask.prompt  # its source too


# ---------------------------------------------------------------- what each answer becomes


@pytest.mark.parametrize(
    ("name", "static_rule"),
    [
        ("good_row_reduction.json", None),
        ("host_code.json", "host-code"),
        ("wrong_plan.json", "launch-plan"),
        ("adversarial_try_except.json", "kernel-construct"),
        ("adversarial_fp16_maths.json", None),  # passes the static layer: the correctness layer refuses it
    ],
)
def test_answers_in_the_candidate_format_become_candidates_the_judge_checks(name, static_rule):
    log, ask = _ask()
    observed = _observed(answer_text(name))
    proposed = domain.answered(log.records, ask, observed)
    assert isinstance(proposed, pb.CandidateProposed) and proposed.origin == "llm" and proposed.observed == observed
    assert proposed.plan.family == "row_reduction" and proposed.candidate_id.startswith("c1-")
    static = check_candidate(proposed.source, proposed.plan)  # the judge's first layer, as it runs it
    rules = {f.rule_id for f in static.findings}
    assert (static.passed, static_rule in rules) == (static_rule is None, static_rule is not None), rules
    if name == "good_row_reduction.json":  # the template's own kernel: same candidate bytes but for the origin
        config = rmsnorm.search_configs("", 64)[0]
        assert (proposed.source, proposed.plan) == (rmsnorm.render(config), rmsnorm.plan(config))


@pytest.mark.parametrize(
    ("observed", "category"),
    [
        (_observed(answer_text("garbage.txt")), "malformed"),
        (_observed(answer_text("truncated.json"), "MAX_TOKENS"), "truncated"),
        (_observed(answer_text("truncated.json"), "length"), "truncated"),
        (_observed(answer_text("not_triton.json")), "not Triton"),
        (_observed(answer_text("schema_extra_field.json")), "schema"),
        (_observed(""), "empty"),
        (_observed("", "BLOCKED_SAFETY"), "blocked"),
        (_observed("", "SAFETY"), "blocked"),
        (_observed("", "content_filter"), "blocked"),
        (_observed("", http_status=500, error="HTTP 500: internal"), "no answer"),
        (_observed("", error="timeout: no answer within 1 s"), "no answer"),
        (_observed("", error="budget spent: 12 of 12 requests made"), "no answer"),
    ],
)
def test_answers_that_are_no_candidate_conclude_the_target_with_why_and_what_was_said(observed, category):
    log, ask = _ask()
    concluded = domain.answered(log.records, ask, observed)
    assert isinstance(concluded, pb.TargetConcluded) and not concluded.swap and concluded.observed == observed
    assert f"the gemini author could not propose candidate 1: {category}" in concluded.reason, concluded.reason


# ---------------------------------------------------------------- the providers against a local endpoint


@pytest.fixture
def endpoint():
    server = LlmEndpoint().start()
    yield server
    server.stop()


def _provider(kind: str, endpoint: LlmEndpoint, **options):
    options = {"answer_tokens": 4096, "timeout_s": 5.0, "backoff_s": 0.01, **options}
    if kind == "gemini":
        return GeminiProvider("gemini-test", endpoint.url, **options)
    return OpenAICompatibleProvider("local-model", endpoint.url + "/v1", **options)


@pytest.fixture(params=["gemini", "openai-compatible"])
def kind(request, monkeypatch):
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    return request.param


async def test_a_provider_asks_with_the_schema_and_records_the_answer(kind, endpoint):
    _, ask = _ask(kind)
    endpoint.script = [Answer(answer_text("good_row_reduction.json"))]
    observed = await _provider(kind, endpoint).answer(ask, attempts=3)
    [request] = endpoint.requests
    assert observed.answer == answer_text("good_row_reduction.json") and observed.finish_reason in ("STOP", "stop")
    assert (observed.http_status, observed.attempts, observed.prompt_tokens, observed.answer_tokens) == (
        200,
        1,
        1200,
        900,
    )
    assert observed.request_sha256 == hashlib.sha256(request.body).hexdigest()
    body = request.json
    if kind == "gemini":
        assert request.path == "/v1beta/models/gemini-test:generateContent"
        assert request.headers["x-goog-api-key"] == KEY
        config = body["generationConfig"]
        assert (config["temperature"], config["seed"], config["maxOutputTokens"]) == (0, authors.SEED, 4096)
        assert config["responseJsonSchema"] == llm_answer.response_schema()
    else:
        assert request.path == "/v1/chat/completions" and request.headers["authorization"] == f"Bearer {KEY}"
        assert (body["temperature"], body["seed"], body["max_tokens"]) == (0, authors.SEED, 4096)
        assert body["response_format"]["json_schema"]["schema"] == llm_answer.response_schema()
    assert KEY.encode() not in observed.SerializeToString()


async def test_a_429_is_retried_with_backoff_and_then_answered(kind, endpoint):
    _, ask = _ask(kind)
    endpoint.script = [Status(429, '{"error": "slow down"}'), Answer(answer_text("good_row_reduction.json"))]
    observed = await _provider(kind, endpoint).answer(ask, attempts=3)
    assert (observed.attempts, observed.http_status, observed.error) == (2, 200, "") and len(endpoint.requests) == 2


async def test_a_500_forever_is_tried_as_often_as_allowed_then_recorded(kind, endpoint):
    _, ask = _ask(kind)
    observed = await _provider(kind, endpoint).answer(ask, attempts=3)
    assert (observed.attempts, observed.http_status, len(endpoint.requests)) == (3, 500, 3)
    assert observed.error.startswith("HTTP 500") and KEY not in observed.error


async def test_a_timeout_is_retried_then_recorded(kind, endpoint):
    _, ask = _ask(kind)
    endpoint.default = Slow(1.5, Answer(answer_text("good_row_reduction.json")))
    observed = await _provider(kind, endpoint, timeout_s=0.3).answer(ask, attempts=2)
    assert observed.attempts == 2 and observed.error.startswith("timeout") and observed.http_status == 0


async def test_a_safety_block_and_a_refused_connection_are_recorded_not_retried(kind, endpoint):
    _, ask = _ask(kind)
    endpoint.script = [Blocked()]
    observed = await _provider(kind, endpoint).answer(ask, attempts=3)
    assert observed.attempts == 1 and observed.finish_reason in ("BLOCKED_SAFETY", "content_filter")
    assert "blocked" in domain.answered(_ask(kind)[0].records, ask, observed).reason
    url = endpoint.url
    endpoint.stop()
    gone = _provider(kind, endpoint)
    gone.base_url = url if kind == "gemini" else url + "/v1"
    observed = await gone.answer(ask, attempts=3)
    assert observed.attempts == 1 and observed.error.startswith("connection") and observed.http_status == 0
    endpoint.start()  # for the fixture's stop


async def test_without_a_gemini_key_nothing_is_sent(endpoint, monkeypatch):
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    _, ask = _ask()
    observed = await _provider("gemini", endpoint).answer(ask, attempts=3)
    assert "GEMINI_API_KEY" in observed.error and endpoint.requests == [] and observed.attempts == 1


# ---------------------------------------------------------------- the service: recorded, counted, replayed


def _replayed(log: Log) -> list:
    """What replay finds wrong with the coder's events (the hand-written log's others have no re-deriver here)."""
    return [m for m in verify(log.records, domain.REDERIVE) if m.type in domain.REDERIVE]


async def _handle(coder: CoderService, log: Log, trigger) -> list:
    out = await coder.handle(trigger, log.records)
    return [log.append(msg, trigger, ordinal=i) for i, msg in enumerate(out)]


async def test_a_run_of_the_llm_author_replays_with_the_endpoint_stopped(endpoint, monkeypatch):
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    endpoint.script = [Answer(answer_text("host_code.json")), Answer(answer_text("garbage.txt"))]
    coder = CoderService({"gemini": _provider("gemini", endpoint)}, authors.Budget(max_calls=5, retries=0))
    log, skills = _run()
    [proposed] = await _handle(coder, log, skills)
    static = check_candidate(proposed.msg.source, proposed.msg.plan)
    verdict = pb.CandidateJudged(
        candidate_id=proposed.msg.candidate_id, reward=-1, observed=pb.JudgeObservation(static_check=static)
    )
    judged = log.append(verdict, proposed)
    [concluded] = await _handle(coder, log, judged)
    assert concluded.type == "TargetConcluded" and "malformed" in concluded.msg.reason
    assert concluded.msg.observed.answer == answer_text("garbage.txt") and concluded.msg.candidates_judged == 1
    assert len(endpoint.requests) == 2 and authors.spent(log.records, coder.budget) == (2, 4200)
    endpoint.stop()
    endpoint.start()  # a fresh endpoint that nobody may call
    endpoint.requests.clear()
    assert _replayed(log) == [] and endpoint.requests == []
    assert all(KEY.encode() not in r.env.SerializeToString() for r in log.records)
    # the candidate is derived from the recorded answer: change the answer and replay says so
    forged = pb.CandidateProposed()
    forged.CopyFrom(proposed.msg)
    forged.observed.answer = answer_text("good_row_reduction.json")
    env = ev.Envelope()
    env.CopyFrom(proposed.env)
    env.payload = forged.SerializeToString(deterministic=True)
    log.records[proposed.seq - 1] = ev.Recorded(proposed.seq, env)
    problems = _replayed(log)
    assert [p.seq for p in problems] == [proposed.seq] and "source" in problems[0].problem


async def test_the_budget_is_counted_from_the_log_and_a_spent_one_asks_nothing(endpoint, monkeypatch):
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    endpoint.script = [Status(503), Answer(answer_text("good_row_reduction.json"))]
    coder = CoderService({"gemini": _provider("gemini", endpoint)}, authors.Budget(max_calls=2, retries=2))
    log, skills = _run()
    [proposed] = await _handle(coder, log, skills)
    assert proposed.msg.observed.attempts == 2 and proposed.msg.observed.max_calls == 2
    judged = log.append(pb.CandidateJudged(candidate_id=proposed.msg.candidate_id, reward=1, reason="ok"), proposed)
    [concluded] = await _handle(coder, log, judged)
    assert "no answer: budget spent: 2 of 2 requests made" in concluded.msg.reason
    assert concluded.msg.candidate_id == proposed.msg.candidate_id and concluded.msg.swap  # the best so far stands
    assert len(endpoint.requests) == 2 and concluded.msg.observed.attempts == 0
    assert _replayed(log) == []


async def test_a_run_naming_a_provider_the_coder_lacks_is_a_recorded_failure():
    log, skills = _run(author="openai-compatible")
    [concluded] = await CoderService().handle(skills, log.records)
    assert "no answer: no such provider in this coder" in concluded.reason


def test_the_committed_good_answer_is_the_template_and_the_adversarial_ones_the_corpus():
    config = rmsnorm.search_configs("", 64)[0]
    assert (
        answer_text("good_row_reduction.json")
        == llm_answer.answer_of(rmsnorm.render(config), rmsnorm.plan(config)) + "\n"
    )
    for name, path in [("adversarial_try_except.json", "schema_try_except_in_kernel.py"),
                       ("adversarial_fp16_maths.json", "kernel_precision_downgrade_fp16.py")]:  # fmt: skip
        source = (ROOT / "tests/adversarial/candidates" / path).read_text()
        assert json.loads(answer_text(name))["source"] == source


async def test_optimize_records_the_author_and_leaves_a_template_run_unset(bus, run_id):
    from services.cli import build_parser
    from services.cli.run_cmds import request_run

    assert build_parser().parse_args(["optimize", "--author", "gemini"]).author == "gemini"
    assert build_parser().parse_args(["optimize"]).author == "template"
    policy = pb.SwapPolicy(min_reward=1, name="cpu-untimed")
    for author, recorded in (("gemini", "gemini"), ("template", "")):
        run = await request_run(
            bus, model="m", policy=policy, max_candidates=1, prompts=[], decode_tokens=1, author=author
        )
        asked = ev.first(await bus.read_run(run), "RunRequested")
        assert asked.msg.author == recorded and (author != "template" or b"template" not in asked.env.payload)
