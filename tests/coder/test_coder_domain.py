"""The coder's decisions as pure functions of hand-built run logs."""

from __future__ import annotations

from coder_testkit import Log, profile_captured

from services.coder import domain
from services.coder.templates import rmsnorm
from services.core.kernels import candidate_sha256, sha256
from services.core.pb import events_pb2 as pb
from services.core.replay import verify

TABLE = rmsnorm.search_configs()


def _start(
    run: pb.RunRequested | None = None, skills: pb.SkillsRetrieved | None = None, family="row_reduction", computes=""
):
    log = Log()
    log.append(run or pb.RunRequested(model="tiny-qwen2", max_candidates=3))
    captured = profile_captured(op_family=family)
    captured.observed.modules[0].computes = computes  # what the server saw the module compute
    log.append(captured)
    trigger = log.append(skills or pb.SkillsRetrieved(target_class=captured.target_class))
    return log, trigger


def _judge(log: Log, proposal_rec, reward: int, speedup: float = 0.0):
    proposal = proposal_rec.msg
    judged = pb.CandidateJudged(
        candidate_id=proposal.candidate_id,
        source_sha256=proposal.source_sha256,
        reward=reward,
        reason=f"test verdict {reward:+d}",
        speedup_vs_eager=speedup,
    )
    return log.append(judged, cause=proposal_rec)


def _answer(log: Log, trigger):
    """Decide, and append the answer to the log as the runner would."""
    out = domain.decide(log.records, trigger)
    assert len(out) == 1, out
    return log.append(out[0], cause=trigger)


def test_cold_start_proposes_the_first_table_config():
    log, trigger = _start()
    [proposed] = domain.decide(log.records, trigger)
    assert isinstance(proposed, pb.CandidateProposed)
    assert (proposed.config.num_warps, proposed.config.rows_per_program) == (4, 1)
    assert proposed.origin == "template" and proposed.skill_id == "" and proposed.attempt == 1
    assert proposed.source == rmsnorm.render(TABLE[0]) and proposed.plan == rmsnorm.plan(TABLE[0])
    assert proposed.source_sha256 == candidate_sha256(proposed.source, proposed.plan) != sha256(proposed.source)
    assert proposed.candidate_id == f"c1-{proposed.source_sha256[:10]}"
    assert proposed.contract.entrypoint == "rmsnorm"
    assert proposed.target_class.endswith("Qwen2RMSNorm")


def test_a_chosen_skill_is_tried_first_and_credited():
    config = pb.TemplateConfig(template=rmsnorm.TEMPLATE, num_warps=8, rows_per_program=2)
    captured = profile_captured()
    skills = pb.SkillsRetrieved(target_class=captured.target_class, chosen_skill_id="sk-42", config=config)
    log, trigger = _start(skills=skills)
    proposal = _answer(log, trigger)
    assert proposal.msg.origin == "skill" and proposal.msg.skill_id == "sk-42"
    assert proposal.msg.config == config
    # the search goes on from the table, skipping what the skill already tried
    second = _answer(log, _judge(log, proposal, reward=1))
    assert second.msg.config == TABLE[0] and second.msg.attempt == 2 and second.msg.origin == "template"


def test_search_then_conclusion_picks_the_best_and_applies_the_default_policy():
    log, trigger = _start()
    c1 = _answer(log, trigger)
    c2 = _answer(log, _judge(log, c1, reward=1))
    assert c2.msg.config == TABLE[1] and c2.msg.candidate_id.startswith("c2-")
    c3 = _answer(log, _judge(log, c2, reward=2, speedup=1.4))
    assert c3.msg.config == TABLE[2]
    concluded = _answer(log, _judge(log, c3, reward=2, speedup=1.9)).msg
    assert isinstance(concluded, pb.TargetConcluded)
    assert concluded.candidate_id == c3.msg.candidate_id  # same reward, faster
    assert concluded.source_sha256 == c3.msg.source_sha256
    assert concluded.reward == 2 and concluded.candidates_judged == 3
    assert concluded.policy.name == "gpu-default" and concluded.policy.min_reward == 2
    assert concluded.swap and "swap" in concluded.reason
    # a late or repeated judgement changes nothing once the target is concluded
    assert domain.decide(log.records, log.records[-2]) == []


def test_ties_go_to_the_earliest_and_a_top_reward_stops_the_search():
    log, trigger = _start(run=pb.RunRequested(max_candidates=5))
    c1 = _answer(log, trigger)
    c2 = _answer(log, _judge(log, c1, reward=3, speedup=2.0))
    assert isinstance(c2.msg, pb.TargetConcluded)
    assert c2.msg.candidate_id == c1.msg.candidate_id and c2.msg.reward == 3 and c2.msg.candidates_judged == 1


def test_an_explicit_policy_is_copied_and_decides_the_swap():
    policy = pb.SwapPolicy(min_reward=1, name="cpu-untimed", reason="no GPU in CI")
    log, trigger = _start(run=pb.RunRequested(max_candidates=1, policy=policy))
    c1 = _answer(log, trigger)
    concluded = _answer(log, _judge(log, c1, reward=1)).msg
    assert concluded.policy == policy and concluded.swap and concluded.reward == 1

    log, trigger = _start(run=pb.RunRequested(max_candidates=1))  # no policy: gpu-default needs +2
    c1 = _answer(log, trigger)
    concluded = _answer(log, _judge(log, c1, reward=1)).msg
    assert not concluded.swap and concluded.candidate_id == c1.msg.candidate_id and "no swap" in concluded.reason


def test_when_every_candidate_is_rejected_nothing_is_swapped():
    policy = pb.SwapPolicy(min_reward=-5, name="reckless")
    log, trigger = _start(run=pb.RunRequested(max_candidates=2, policy=policy))
    c1 = _answer(log, trigger)
    c2 = _answer(log, _judge(log, c1, reward=-1))
    concluded = _answer(log, _judge(log, c2, reward=-1)).msg
    assert concluded.candidate_id == "" and concluded.reward == -1 and not concluded.swap
    assert "test verdict -1" in concluded.reason


def test_targets_that_cannot_be_templated_are_concluded_with_a_reason():
    log, trigger = _start(family="matmul")
    [concluded] = domain.decide(log.records, trigger)
    assert isinstance(concluded, pb.TargetConcluded) and not concluded.swap
    assert "no template for op family 'matmul'" in concluded.reason

    log, trigger = _start(skills=pb.SkillsRetrieved(target_class="some.other.Norm"))
    [concluded] = domain.decide(log.records, trigger)
    assert "holds no introspection of some.other.Norm" in concluded.reason

    log, trigger = _start(skills=pb.SkillsRetrieved(target_class=""))
    assert domain.decide(log.records, trigger) == []


def test_rederive_reproduces_every_coder_event_byte_for_byte():
    log, trigger = _start(run=pb.RunRequested(max_candidates=2))
    c1 = _answer(log, trigger)
    c2 = _answer(log, _judge(log, c1, reward=1))
    _answer(log, _judge(log, c2, reward=2, speedup=1.2))
    assert [r.type for r in log.records][-1] == "TargetConcluded"
    coder_types = set(domain.REDERIVE)
    assert [m for m in verify(log.records, domain.REDERIVE) if m.type in coder_types] == []
    # a tampered proposal is caught
    tampered = log.records[3]
    msg = tampered.msg
    msg.attempt = 7
    tampered.env.payload = msg.SerializeToString(deterministic=True)
    problems = [m for m in verify(log.records, domain.REDERIVE) if m.type in coder_types]
    assert len(problems) == 1 and "attempt" in problems[0].problem


def test_what_the_profile_saw_the_module_compute_chooses_the_kernel_variant():
    """Gemma's norm (seen computing rmsnorm_offset) gets the offset kernel, from a cold start and from a skill
    learned on a plain RMSNorm (its launch shape kept, its arithmetic not); a norm the template does not write
    is concluded with that reason."""
    log, trigger = _start(computes="rmsnorm_offset")
    first = _answer(log, trigger)
    offset = rmsnorm.search_configs("rmsnorm_offset")
    assert first.msg.config == offset[0] and first.msg.source == rmsnorm.render(offset[0])
    assert "_rmsnorm_offset_fwd_kernel" in first.msg.source and first.msg.plan == rmsnorm.plan(offset[0])
    second = _answer(log, _judge(log, first, reward=1))
    assert second.msg.config == offset[1]  # the search stays within the variant

    skill = pb.TemplateConfig(template=rmsnorm.TEMPLATE, num_warps=8, rows_per_program=2)
    captured = profile_captured()
    skills = pb.SkillsRetrieved(target_class=captured.target_class, chosen_skill_id="sk-7", config=skill)
    log, trigger = _start(skills=skills, computes="rmsnorm_offset")
    proposal = _answer(log, trigger)
    assert (proposal.msg.config.num_warps, proposal.msg.config.rows_per_program) == (8, 2)
    assert proposal.msg.config.variant == "rmsnorm_offset" and proposal.msg.origin == "skill"

    log, trigger = _start(computes="layernorm")
    [concluded] = domain.decide(log.records, trigger)
    assert isinstance(concluded, pb.TargetConcluded) and not concluded.swap
    assert "the template does not write layernorm" in concluded.reason
