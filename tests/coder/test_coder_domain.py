"""The coder's decisions as pure functions of hand-built run logs."""

from __future__ import annotations

import pytest
from coder_testkit import Log, profile_captured

from services.coder import domain
from services.core import events as ev
from services.core.kernels import candidate_sha256, sha256
from services.core.pb import events_pb2 as pb
from services.core.replay import verify
from services.ops.rotary import template as rope_template
from services.ops.row_reduction import template as rmsnorm

TABLE = rmsnorm.search_configs("", 64)  # the profiles here are 64 wide: the narrow-row order


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


def _judge(log: Log, proposal_rec, reward: int, speedup: float = 0.0, copy: float = 0.0):
    """The judge's verdict; `copy` is the candidate's share of copy bandwidth at its largest timed shape."""
    proposal = proposal_rec.msg
    judged = pb.CandidateJudged(
        candidate_id=proposal.candidate_id,
        source_sha256=proposal.source_sha256,
        reward=reward,
        reason=f"test verdict {reward:+d}",
        speedup_vs_eager=speedup,
    )
    if copy:
        judged.observed.timing.rows.add(shape="32768x64", bytes_moved=1e6, floor_us=copy * 10, candidate_us=10)
    return log.append(judged, cause=proposal_rec)


def _answers(log: Log, trigger) -> list:
    """Decide, and append every answer to the log as the runner would (ordinals 0, 1, ...)."""
    out = domain.decide(log.records, trigger)
    return [log.append(msg, cause=trigger, ordinal=i) for i, msg in enumerate(out)]


def _answer(log: Log, trigger):
    [rec] = _answers(log, trigger)
    return rec


def _launch(rec) -> tuple[int, int]:
    return rec.msg.config.num_warps, rec.msg.config.rows_per_program


def test_cold_start_proposes_the_first_search_step_at_once():
    log, trigger = _start()
    first, second = domain.decide(log.records, trigger)
    assert isinstance(first, pb.CandidateProposed) and isinstance(second, pb.CandidateProposed)
    # 64 wide: one warp and several rows a program come first
    assert (first.config.num_warps, first.config.rows_per_program) == (1, 1) and second.config == TABLE[1]
    assert first.origin == "template" and first.skill_id == "" and (first.attempt, second.attempt) == (1, 2)
    assert first.source == rmsnorm.render(TABLE[0]) and first.plan == rmsnorm.plan(TABLE[0])
    assert first.source_sha256 == candidate_sha256(first.source, first.plan) != sha256(first.source)
    assert first.candidate_id == f"c1-{first.source_sha256[:10]}" and second.candidate_id.startswith("c2-")
    assert first.contract.entrypoint == "rmsnorm"
    assert first.target_class.endswith("Qwen2RMSNorm")


def test_the_search_table_order_follows_the_row_width():
    assert (rmsnorm.search_configs("", 1536)[0].num_warps, rmsnorm.search_configs("", 1536)[0].rows_per_program) == (
        4,
        1,
    )
    assert (TABLE[0].num_warps, TABLE[0].rows_per_program) == (1, 1)
    assert {(c.num_warps, c.rows_per_program) for c in TABLE} == {
        (c.num_warps, c.rows_per_program) for c in rmsnorm.search_configs()
    }  # the same space, another order


def test_a_chosen_skill_is_tried_first_beside_the_tables_first():
    config = pb.TemplateConfig(template=rmsnorm.TEMPLATE, num_warps=8, rows_per_program=2)
    captured = profile_captured()
    skills = pb.SkillsRetrieved(target_class=captured.target_class, chosen_skill_id="sk-42", config=config)
    log, trigger = _start(skills=skills)
    skill, table = _answers(log, trigger)
    assert skill.msg.origin == "skill" and skill.msg.skill_id == "sk-42" and skill.msg.config == config
    assert table.msg.config == TABLE[0] and table.msg.attempt == 2 and table.msg.origin == "template"


def test_a_sibling_templates_recipe_seeds_the_search_by_its_launch_shape_since_schema_12():
    """The store may choose a residual norm's recipe for a plain norm (one physics): its launch shape comes first,
    rendered by the norm's own template, where the norm's table holds that shape; a run recorded before schema 12
    re-derives the cold start it made."""
    sibling = pb.TemplateConfig(template="add_norm_onepass", num_warps=TABLE[3].num_warps,
                                rows_per_program=TABLE[3].rows_per_program, variant="add_rmsnorm")  # fmt: skip
    captured = profile_captured()
    skills = pb.SkillsRetrieved(target_class=captured.target_class, chosen_skill_id="sk-7", config=sibling)
    log, trigger = _start(skills=skills)
    seeded, beside = _answers(log, trigger)
    assert seeded.msg.origin == "skill" and seeded.msg.skill_id == "sk-7" and seeded.msg.config == TABLE[3]
    assert seeded.msg.source == rmsnorm.render(TABLE[3]) and beside.msg.config == TABLE[0]
    assert [m for m in verify(log.records, domain.REDERIVE) if m.type in domain.REDERIVE] == []  # it replays

    old = ev.SCHEMA_VERSION
    trigger.env.schema_version = 11
    try:
        cold, _ = domain.decide(log.records[:3], trigger)
    finally:
        trigger.env.schema_version = old
    assert cold.origin == "template" and cold.skill_id == "" and cold.config == TABLE[0]

    unknown = pb.TemplateConfig(template="rotary_positions", num_warps=4, params={"heads": 16, "together": 0})
    skills = pb.SkillsRetrieved(target_class=captured.target_class, chosen_skill_id="sk-8", config=unknown)
    log, trigger = _start(skills=skills)
    first, _ = domain.decide(log.records, trigger)
    assert first.origin == "template" and first.config == TABLE[0]  # a shape the norm's table does not hold


def test_a_search_step_waits_for_all_its_verdicts_then_refines_around_the_best():
    log, trigger = _start()
    c1, c2 = _answers(log, trigger)
    assert domain.decide(log.records, _judge(log, c1, reward=1)) == []  # c2 is still being judged
    c3 = _answer(log, _judge(log, c2, reward=2, speedup=1.4))  # budget 3: one more
    # nearest to the best so far (c2: 1 warp, 2 rows) among the untried, the table's order between equals
    assert _launch(c2) == (1, 2) and _launch(c3) == (2, 2) and c3.msg.candidate_id.startswith("c3-")
    concluded = _answer(log, _judge(log, c3, reward=2, speedup=1.9)).msg
    assert isinstance(concluded, pb.TargetConcluded)
    assert concluded.candidate_id == c3.msg.candidate_id  # same reward, faster
    assert concluded.source_sha256 == c3.msg.source_sha256
    assert concluded.reward == 2 and concluded.candidates_judged == 3
    assert concluded.policy.name == "gpu-default" and concluded.policy.min_reward == 2
    assert concluded.swap and "candidate budget of 3 spent" in concluded.reason
    # a late or repeated judgement changes nothing once the target is concluded
    assert domain.decide(log.records, log.records[-2]) == []


def test_the_row_blocking_of_a_rejected_candidate_goes_last():
    untried = TABLE[2:]
    verdicts = [(TABLE[0], pb.CandidateJudged(reward=-1)), (TABLE[1], pb.CandidateJudged(reward=1))]
    order = domain.refine(list(untried), verdicts)
    rejected_rows = TABLE[0].rows_per_program
    tail = [c for c in order if c.rows_per_program == rejected_rows]
    assert order[-len(tail) :] == tail and order[0].rows_per_program != rejected_rows
    assert (order[0].num_warps, order[0].rows_per_program) == (2, 2)  # nearest to the passing (1, 2)


def test_a_top_reward_at_copy_bandwidth_stops_the_search_and_below_it_goes_on():
    log, trigger = _start(run=pb.RunRequested(max_candidates=5))
    c1, c2 = _answers(log, trigger)
    _judge(log, c1, reward=3, speedup=2.0, copy=0.9)
    concluded = _answer(log, _judge(log, c2, reward=1)).msg
    assert isinstance(concluded, pb.TargetConcluded) and "90% of copy bandwidth" in concluded.reason
    assert concluded.candidate_id == c1.msg.candidate_id and concluded.reward == 3 and concluded.candidates_judged == 2

    log, trigger = _start(run=pb.RunRequested(max_candidates=5))
    c1, c2 = _answers(log, trigger)
    _judge(log, c1, reward=3, speedup=2.0, copy=0.6)  # the best baseline beaten, the memory system not reached
    more = _answers(log, _judge(log, c2, reward=1))
    assert [r.type for r in more] == ["CandidateProposed"] * 2 and _launch(more[0]) == (2, 1)  # next to c1 (1, 1)


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
    c1, c2 = _answers(log, trigger)
    _judge(log, c1, reward=-1)
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


def test_rederive_reproduces_every_coder_event_byte_for_byte_at_its_ordinal():
    log, trigger = _start(run=pb.RunRequested(max_candidates=3))
    c1, c2 = _answers(log, trigger)
    _judge(log, c1, reward=1)
    c3 = _answer(log, _judge(log, c2, reward=2, speedup=1.2))
    _answer(log, _judge(log, c3, reward=1))
    assert [r.type for r in log.records][-1] == "TargetConcluded"
    coder_types = set(domain.REDERIVE)
    assert [m for m in verify(log.records, domain.REDERIVE) if m.type in coder_types] == []
    # a tampered proposal is caught: the second of the fan-out, re-derived at its own place
    msg = c2.msg
    msg.attempt = 7
    c2.env.payload = msg.SerializeToString(deterministic=True)
    problems = [m for m in verify(log.records, domain.REDERIVE) if m.type in coder_types]
    assert len(problems) == 1 and problems[0].seq == c2.seq and "attempt" in problems[0].problem


def test_a_fan_out_stored_in_another_order_does_not_replay():
    """Each answer is its handler's answer at its place: the two proposals of one step swapped in the log (their
    ids derived at the swapped places) are both re-derived wrong."""
    log, trigger = _start()
    out = domain.decide(log.records, trigger)
    c2 = log.append(out[1], cause=trigger, ordinal=0)
    c1 = log.append(out[0], cause=trigger, ordinal=1)
    problems = [m for m in verify(log.records, domain.REDERIVE) if m.type in domain.REDERIVE]
    assert {p.seq for p in problems} == {c1.seq, c2.seq}


def test_what_the_profile_saw_the_module_compute_chooses_the_kernel_variant():
    """Gemma's norm (seen computing rmsnorm_offset) gets the offset kernel, from a cold start and from a skill
    learned on a plain RMSNorm (its launch shape kept, its arithmetic not); a norm the template does not write
    is concluded with that reason."""
    log, trigger = _start(computes="rmsnorm_offset")
    first, second = _answers(log, trigger)
    offset = rmsnorm.search_configs("rmsnorm_offset", 64)
    assert first.msg.config == offset[0] and first.msg.source == rmsnorm.render(offset[0])
    assert "_rmsnorm_offset_fwd_kernel" in first.msg.source and first.msg.plan == rmsnorm.plan(offset[0])
    assert second.msg.config == offset[1]  # the search stays within the variant

    skill = pb.TemplateConfig(template=rmsnorm.TEMPLATE, num_warps=8, rows_per_program=2)
    captured = profile_captured()
    skills = pb.SkillsRetrieved(target_class=captured.target_class, chosen_skill_id="sk-7", config=skill)
    log, trigger = _start(skills=skills, computes="rmsnorm_offset")
    proposal = _answers(log, trigger)[0]
    assert (proposal.msg.config.num_warps, proposal.msg.config.rows_per_program) == (8, 2)
    assert proposal.msg.config.variant == "rmsnorm_offset" and proposal.msg.origin == "skill"

    log, trigger = _start(computes="softmax")
    [concluded] = domain.decide(log.records, trigger)
    assert isinstance(concluded, pb.TargetConcluded) and not concluded.swap
    assert "the template does not write softmax" in concluded.reason


def test_a_gated_mlp_target_is_written_as_a_layer_bound_by_the_roles_the_server_found():
    """The profile's roles (found running the module) bind the layer contract; the search walks the gated
    template's block sizes, nearest the best verdict first."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaMLP

    from services.ops import gated_mlp
    from services.ops.gated_mlp import template as gated

    mlp = LlamaMLP(LlamaConfig(hidden_size=32, intermediate_size=96))
    captured = profile_captured(mlp, op_family="elementwise")
    profile = captured.observed.modules[0]
    profile.computes, profile.roles["gate_proj"] = "swiglu", "gate_proj"
    profile.roles.update(up_proj="up_proj", down_proj="down_proj")
    log = Log()
    log.append(pb.RunRequested(model="tiny-llama", max_candidates=4))
    log.append(captured)
    trigger = log.append(pb.SkillsRetrieved(target_class=captured.target_class))
    first, second = _answers(log, trigger)
    table = gated.search_configs("swiglu")
    assert [first.msg.config, second.msg.config] == table[:2]
    contract = first.msg.contract
    assert contract.kind == "layer" and contract.entrypoint == gated_mlp.ENTRYPOINT
    assert [(b.param, b.attr, b.kind) for b in contract.bindings] == [(r, r, "module") for r in gated_mlp.ROLES]
    assert first.msg.plan.family == "gated_mlp" and first.msg.source == gated.render(table[0])
    _judge(log, first, 1, speedup=1.0)
    last = _judge(log, second, 2, speedup=1.4)  # 8 warps at the first block beat 4
    third, fourth = _answers(log, last)
    best = second.msg.config
    assert third.msg.config.num_warps == best.num_warps  # one step away from the best: the next block size
    assert {third.msg.config.params["block"], fourth.msg.config.params["block"]} <= {1024, 4096}

    profile.roles.clear()  # roles not recorded (a profile from before they were): no layer contract to write
    log = Log()
    log.append(pb.RunRequested(model="tiny-llama"))
    log.append(captured)
    [concluded] = domain.decide(log.records, log.append(pb.SkillsRetrieved(target_class=captured.target_class)))
    assert isinstance(concluded, pb.TargetConcluded) and "roles" in concluded.reason


def test_a_rope_target_is_searched_in_the_order_its_live_positions_favour():
    """At decode a program per (position, q or k) led on the H200, at prefill one per position: the first proposal
    follows the profile's live q (batch, heads, seq, head_dim)."""
    target = "transformers.models.qwen2.modeling_qwen2.apply_rotary_pos_emb"
    firsts = {}
    for seq in (1, 4096):
        log = Log()
        log.append(pb.RunRequested(model="tiny-qwen2", max_candidates=2))
        intro = pb.ModuleIntrospection(class_path=target, forward_params=["q", "k", "cos", "sin", "unsqueeze_dim"])
        profile = pb.ModuleClassProfile(
            introspection=intro, input_shape=[1, 12, seq, 128], second_shape=[1, 2, seq, 128], computes="rope_half"
        )
        ranked = pb.RankedTarget(class_path=target, fingerprint=pb.Fingerprint(op_family="rotary"))
        log.append(pb.ProfileCaptured(observed=pb.ProfileObservation(modules=[profile]), ranking=[ranked]))
        trigger = log.append(pb.SkillsRetrieved(target_class=target))
        proposals = domain.decide(log.records, trigger)
        assert proposals and all(p.config.template == "rotary_positions" for p in proposals), proposals
        firsts[seq] = proposals[0].config.params["together"]
    assert firsts == {1: 0, 4096: 1}


def _judge_timed(log: Log, proposal_rec, ratios: dict[str, float]):
    """A +2 verdict with GPU times at its shapes: candidate/eager at each (eager 10 us)."""
    judged = pb.CandidateJudged(
        candidate_id=proposal_rec.msg.candidate_id, source_sha256=proposal_rec.msg.source_sha256, reward=2,
        speedup_vs_eager=2.0,
    )  # fmt: skip
    for shape, ratio in ratios.items():
        judged.observed.timing.rows.add(shape=shape, candidate_us=10 * ratio, eager_us=10)
    return log.append(judged, cause=proposal_rec)


def test_two_configs_each_fastest_on_one_side_of_decode_sized_rows_are_combined_in_a_dispatch():
    """A verdict's GPU times say where each launch shape leads: the next proposal serves calls of up to 64 rows with
    the config fastest there and the rest with the config fastest beyond, in one candidate the judge draws both
    sides of; untimed verdicts (CPU), one config leading both sides, or a run recorded at schema 6 propose none."""
    log, trigger = _start(run=pb.RunRequested(max_candidates=4))
    c1, c2 = _answers(log, trigger)
    first = _judge_timed(log, c1, {"1x1x64": 0.5, "4096x64": 0.9, "32768x64": 0.9})
    judged = _judge_timed(log, c2, {"1x1x64": 0.7, "4096x64": 0.6, "32768x64": 0.6})
    dispatch, _ = _answers(log, judged)
    config = dispatch.msg.config
    assert _launch(dispatch) == _launch(c2) and dict(config.params) == {
        "dispatch_rows": 64, "small_warps": c1.msg.config.num_warps, "small_rows": c1.msg.config.rows_per_program
    }  # fmt: skip
    small, large = dispatch.msg.plan.launches
    assert (small.max_rows, small.num_warps, large.max_rows, large.num_warps) == (64, _launch(c1)[0], 0, _launch(c2)[0])
    assert dispatch.msg.source == c1.msg.source  # the same kernel, launched two ways

    verdicts = [(c1.msg.config, first.msg), (c2.msg.config, judged.msg)]
    assert domain.dispatch_config(rmsnorm, verdicts) == config
    untimed = [(c, pb.CandidateJudged(reward=1)) for c, _ in verdicts]
    assert domain.dispatch_config(rmsnorm, untimed) is None
    one_leads = pb.CandidateJudged(reward=2)
    one_leads.observed.timing.rows.add(shape="1x1x64", candidate_us=1, eager_us=10)
    one_leads.observed.timing.rows.add(shape="4096x64", candidate_us=1, eager_us=10)
    assert domain.dispatch_config(rmsnorm, [verdicts[0], (c2.msg.config, one_leads)]) is None

    old = ev.Recorded(judged.seq, judged.env)
    old.env.schema_version = 6
    assert all(not m.config.params for m in domain.decide(log.records[:-2], old))


def test_rope_configs_each_fastest_on_one_side_of_4096_positions_are_combined_in_a_dispatch():
    """RoPE's timed calls pack q, k, cos and sin as (batch, seq, heads + 2, head_dim): the dispatch compares their
    positions (batch · seq), not their rows, and its configs (which always carry params) count as plain until they
    dispatch. The H200's order: a program per head at 16 positions up to 4,096, one per position beyond."""
    configs = rope_template.search_configs("rope_half")
    blocks, together = configs[2], configs[0]

    def timed(ratios):
        judged = pb.CandidateJudged(reward=2)
        for shape, ratio in zip(("1x1x16x128", "1x4096x16x128", "1x32768x16x128"), ratios, strict=True):
            judged.observed.timing.rows.add(shape=shape, candidate_us=10 * ratio, eager_us=10)
        return judged

    verdicts = [(blocks, timed((0.09, 0.09, 0.12))), (together, timed((0.10, 0.10, 0.08)))]
    combined = domain.dispatch_config(rope_template, verdicts)
    assert combined == rope_template.combine(blocks, together, 4096)
    assert dict(combined.params) == {
        "heads": 0, "together": 1, "dispatch_positions": 4096, "small_warps": 1, "small_heads": 0,
        "small_together": 0, "small_positions": 16,
    }  # fmt: skip
    assert not rope_template.plain(combined)
    assert domain.dispatch_config(rope_template, [*verdicts, (combined, timed((0.01, 0.01, 0.01)))]) == combined
    one_leads = [(blocks, timed((0.09, 0.09, 0.07))), (together, timed((0.10, 0.10, 0.08)))]
    assert domain.dispatch_config(rope_template, one_leads) is None


TAKES = "(q, k, cos, sin[, unsqueeze_dim]) or (x, cos, sin[, unsqueeze_dim])"
REFUSALS = [  # family, what the target was seen computing, its forward's parameters, why it is refused
    ("row_reduction", "", ["x", "residual"], "the module does not fit the template: {target}.forward takes "
     "(x, residual); the RMSNorm entrypoint takes (hidden_states)"),
    ("gated_mlp", "swiglu", ["x"], "{target} has no recorded gate, up and down roles for a layer contract"),
    ("plain_mlp", "mlp_gelu_tanh", ["x"], "{target} has no recorded fc and proj roles for a layer contract"),
    ("residual_norm", "add_rmsnorm", ["hidden_states"],
     "{target} has no recorded input norm, attention, post norm and MLP roles for a layer contract"),
    ("rotary", "rope_half", ["a", "b"], "{target}(a, b) does not take " + TAKES),
]  # fmt: skip


@pytest.mark.parametrize(("family", "computes", "params", "why"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_each_family_refuses_a_target_it_cannot_bind_in_the_words_runs_recorded(family, computes, params, why):
    """A family's contract_for refuses with the reason TargetConcluded recorded when the coder held these refusals
    itself: replay re-derives recorded runs' conclusions, so the words are part of the record."""
    log, trigger = _start(family=family, computes=computes)
    captured = log.records[1].msg
    target = captured.target_class
    captured.observed.modules[0].introspection.forward_params[:] = params
    log.records[1].env.payload = captured.SerializeToString(deterministic=True)
    [concluded] = domain.decide(log.records, trigger)
    assert isinstance(concluded, pb.TargetConcluded) and not concluded.swap
    assert concluded.reason == "no candidate was judged: " + why.format(target=target)
