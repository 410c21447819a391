"""The judge service: layers in order, stopping at the first failure; with the coder over a real nats-server."""

from __future__ import annotations

from judge_testkit import honest_source, log_of, profile_captured, proposal, qwen_norm, serving
from runlog import publish_envelope, wait_for_events

from services.coder import domain as coder_domain
from services.coder.service import CoderService
from services.core import events as ev
from services.core.pb import events_pb2 as pb
from services.core.replay import verify
from services.judge import domain as judge_domain
from services.judge.report import describe, verdict_layer
from services.judge.service import JudgeService

REDERIVE = {**coder_domain.REDERIVE, **judge_domain.REDERIVE}


async def test_a_static_failure_stops_before_the_contract_and_the_sandbox():
    captured = profile_captured(qwen_norm())
    hostile = honest_source().replace("import triton\n", "import triton\nimport os\n")
    prior = log_of(captured, proposal(hostile, captured))
    [judged] = await JudgeService(device="cpu").handle(prior[-1], prior)
    assert judged.reward == -1 and judged.reason.startswith("static check failed: kernel-import")
    assert verdict_layer(judged.observed) == ("static", ["kernel-import"])
    assert not judged.observed.HasField("contract") and not judged.observed.HasField("correctness")
    assert judge_domain.REDERIVE["CandidateJudged"](prior, prior[-1], judged) == judged


async def test_a_candidate_with_host_code_is_refused_by_the_schema_and_nothing_runs(tmp_path):
    captured = profile_captured(qwen_norm())
    marker = tmp_path / "ran"
    host = honest_source() + f"\n\ndef rmsnorm_forward(hidden_states, weight, eps):\n    open({str(marker)!r}, 'w')\n"
    for source, plan in ((host, None), (honest_source(), pb.LaunchPlan())):  # host code; a plan-less candidate
        prior = log_of(captured, proposal(source, captured, plan=plan))
        [judged] = await JudgeService(device="cpu").handle(prior[-1], prior)
        layer, rules = verdict_layer(judged.observed)
        assert judged.reward == -1 and layer == "static", judged.reason
        assert rules[0] in ("host-code", "candidate-format"), rules
        assert not judged.observed.HasField("correctness")
    assert not marker.exists()


async def test_a_source_that_does_not_match_its_hash_is_refused():
    captured = profile_captured(qwen_norm())
    claimed = proposal(honest_source(), captured)
    claimed.source += "\n# edited after hashing\n"
    prior = log_of(captured, claimed)
    [judged] = await JudgeService(device="cpu").handle(prior[-1], prior)
    assert judged.reward == -1 and "source-hash" in judged.reason
    assert judged.source_sha256 != claimed.source_sha256  # the hash of what was judged


async def test_a_contract_failure_stops_before_the_sandbox():
    captured = profile_captured(qwen_norm())
    bad = proposal(honest_source(), captured)
    bad.contract.bindings[0].attr = "scale"
    prior = log_of(captured, bad)
    [judged] = await JudgeService(device="cpu").handle(prior[-1], prior)
    assert judged.reward == -1 and judged.reason.startswith(
        "contract check failed: binding-missing: binding weight -> scale"
    )
    assert not judged.observed.HasField("correctness")


async def test_a_candidate_of_another_family_than_its_contracts_is_refused_at_the_contract():
    """A gated-MLP candidate (a real kernel of that family) offered against a norm under the norm's module-class
    contract: refused before anything runs, never judged against the norm's oracle."""
    from services.ops.gated_mlp import template as gated

    captured = profile_captured(qwen_norm())
    config = gated.search_configs()[0]
    candidate = proposal(gated.render(config), captured, plan=gated.plan(config))
    prior = log_of(captured, candidate)
    [judged] = await JudgeService(device="cpu").handle(prior[-1], prior)
    assert judged.reward == -1 and judged.observed.contract.rule_id == "contract-kind"
    assert "a gated_mlp candidate plugs in as a 'layer' contract, not 'module_class'" in judged.reason
    assert not judged.observed.HasField("correctness")


async def test_coder_and_judge_search_conclude_and_replay_over_nats(bus, nats_server, run_id):
    policy = pb.SwapPolicy(min_reward=1, name="cpu-untimed", reason="CI has no GPU: correctness only")
    captured = profile_captured(qwen_norm())
    async with serving(nats_server.url, [CoderService(), JudgeService(device="cpu")], run_id):
        request = await publish_envelope(
            bus, run_id, pb.RunRequested(model="tiny-qwen2", policy=policy, max_candidates=2)
        )
        profile = await publish_envelope(bus, run_id, captured, request, producer="profiler")
        await publish_envelope(
            bus, run_id, pb.SkillsRetrieved(target_class=captured.target_class), profile, "skillstore"
        )
        [concluded] = await wait_for_events(bus, run_id, "TargetConcluded", timeout=90)
    log = await bus.read_run(run_id)
    # one search step: two proposals at once, each judged, then the conclusion
    assert [r.type for r in log][3:] == ["CandidateProposed"] * 2 + ["CandidateJudged"] * 2 + ["TargetConcluded"]
    judged = [r.msg for r in ev.all_of(log, "CandidateJudged")]
    assert [j.reward for j in judged] == [1, 1], [j.reason for j in judged]
    assert all(j.observed.correctness.passed and j.observed.correctness.interpreted for j in judged)
    assert all(verdict_layer(j.observed) == ("passes", []) for j in judged)
    text = describe(judged[0])  # per layer: what was checked, and the evidence
    for line in (
        "static: passed",
        "contract: passed",
        "sandbox: exit code 0",
        "correctness: passed",
        "max error bfloat16" if "bfloat16" in text else "max error float32",
        "timing: not measured",
    ):
        assert line in text, (line, text)
    assert judged[0].observed.sandbox.gpu_health == "no GPU"
    assert concluded.msg.swap and concluded.msg.candidate_id == judged[0].candidate_id
    assert concluded.msg.policy == policy
    problems = [str(m) for m in verify(log, REDERIVE) if m.type in REDERIVE]
    assert problems == []
