"""The skill store's pure decisions: UCB1, retrieval, publishing, credit, and their replay."""

from __future__ import annotations

import math

from services.core import events as ev
from services.core.pb import events_pb2 as pb
from services.core.replay import verify
from services.profiler import domain as profiler_domain
from services.skillstore import domain
from services.skillstore.domain import skill_id_for, ucb1

QWEN = "transformers.models.qwen2.modeling_qwen2.Qwen2RMSNorm"


def _arm(skill_id: str, pulls: int, reward_sum: float, distance: float = 0.1, warps: int = 4) -> pb.SkillCandidate:
    cfg = pb.TemplateConfig(template="row_reduction_onepass", num_warps=warps, rows_per_program=1)
    return pb.SkillCandidate(skill_id=skill_id, distance=distance, pulls=pulls, reward_sum=reward_sum, config=cfg)


def test_skill_id_is_a_function_of_family_and_recipe(config):
    assert skill_id_for("row_reduction", config) == skill_id_for(
        "row_reduction",
        pb.TemplateConfig(**{"template": "row_reduction_onepass", "num_warps": 4, "rows_per_program": 1}),
    )
    other = pb.TemplateConfig(template="row_reduction_onepass", num_warps=8, rows_per_program=1)
    ids = {skill_id_for("row_reduction", config), skill_id_for("row_reduction", other), skill_id_for("matmul", config)}
    assert len(ids) == 3 and all(i.startswith("sk-") for i in ids)


def test_ucb1_explores_unpulled_arms_first_then_exploits():
    assert ucb1([_arm("a", 10, 30.0), _arm("b", 0, 0.0)]) == [ucb1([_arm("a", 10, 30.0)])[0], math.inf]
    good, bad = ucb1([_arm("a", 10, 30.0), _arm("b", 10, -10.0)])
    assert good > bad
    assert ucb1([]) == []

    # A simulated bandit over three recipes with fixed rewards: each is tried once, then the best dominates.
    rewards = {"a": 1, "b": 3, "c": -1}
    arms = {k: _arm(k, 0, 0.0) for k in rewards}
    picks = []
    for _ in range(40):
        order = sorted(arms)
        scores = ucb1([arms[k] for k in order])
        pick = min(range(len(order)), key=lambda i: (-scores[i], order[i]))
        chosen = arms[order[pick]]
        chosen.pulls += 1
        chosen.reward_sum += rewards[chosen.skill_id]
        picks.append(chosen.skill_id)
    assert picks[:3] == ["a", "b", "c"]  # unpulled first, ties by skill id
    assert arms["b"].pulls > arms["a"].pulls > arms["c"].pulls
    assert arms["b"].pulls > 0.6 * len(picks)  # 28 of 40: exploiting, while still checking the others


def _retrieve(profiled_trigger, log, neighbours, size=None) -> pb.SkillsRetrieved:
    observed = pb.SkillsObservation(neighbours=neighbours, library_size=len(neighbours) if size is None else size)
    return domain.derive_skills_retrieved(log, profiled_trigger, observed)


def test_cold_start_gives_an_empty_config(new_run, profiled):
    run = new_run()
    trigger = profiled(run, QWEN, 1536)
    cold = _retrieve(trigger, run.log, [])
    assert (cold.target_class, cold.chosen_skill_id, cold.config, list(cold.ucb_scores)) == (
        QWEN,
        "",
        pb.TemplateConfig(),
        [],
    )
    assert cold.reason.startswith("cold start: the library holds 0 skills")
    far = _retrieve(trigger, run.log, [_arm("sk-far", 3, 9.0, distance=2.83)], size=7)
    assert far.chosen_skill_id == "" and list(far.ucb_scores) == [-math.inf]
    assert "beyond 1.0" in far.reason and "7 skills" in far.reason


def test_warm_retrieval_picks_by_ucb_among_near_neighbours(new_run, profiled):
    run = new_run()
    trigger = profiled(run, QWEN, 1536)
    neighbours = [_arm("sk-b", 4, 8.0, 0.05), _arm("sk-a", 2, 6.0, 0.2, warps=8), _arm("sk-far", 0, 0.0, 3.0)]
    warm = _retrieve(trigger, run.log, neighbours)
    scores = list(warm.ucb_scores)
    assert scores[2] == -math.inf  # beyond the threshold: never chosen, even unpulled
    assert scores == ucb1(neighbours[:2]) + [-math.inf]
    assert warm.chosen_skill_id == "sk-a" and warm.config.num_warps == 8  # fewer pulls, higher mean: wins
    assert "chose sk-a" in warm.reason and "mean reward +3.00 over 2 pulls" in warm.reason
    tie = _retrieve(trigger, run.log, [_arm("sk-z", 0, 0.0), _arm("sk-y", 0, 0.0)])
    assert tie.chosen_skill_id == "sk-y" and "never tried" in tie.reason  # same distance: tie broken by skill id
    nearer = _retrieve(trigger, run.log, [_arm("sk-a", 0, 0.0, 0.013), _arm("sk-b", 0, 0.0, 0.006)])
    assert nearer.chosen_skill_id == "sk-b"  # equal scores: the nearer physics first, whatever the ids' order


def _candidate(run, cause, config, skill_id="", candidate_id="c1") -> ev.Recorded:
    msg = pb.CandidateProposed(
        candidate_id=candidate_id,
        target_class=QWEN,
        source="...",
        source_sha256="ab" * 32,
        config=config,
        origin="skill" if skill_id else "template",
        skill_id=skill_id,
    )
    return run.add(msg, "coder", cause)


def _judged(run, proposed, reward) -> ev.Recorded:
    msg = pb.CandidateJudged(candidate_id=proposed.msg.candidate_id, source_sha256="ab" * 32, reward=reward)
    return run.add(msg, "judge", proposed)


def test_publish_credit_and_penalty(new_run, profiled, config):
    run = new_run()
    trigger = profiled(run, QWEN, 1536)
    retrieved = run.add(_retrieve(trigger, run.log, []), "skillstore", trigger)

    failed = _candidate(run, retrieved, config, skill_id="sk-old", candidate_id="c0")
    judged_bad = _judged(run, failed, -1)
    assert domain.decide_publish(run.log, judged_bad) == []
    (penalty,) = domain.decide(run.log, judged_bad)
    assert (penalty.DESCRIPTOR.name, penalty.skill_id, penalty.reward) == ("SkillCredited", "sk-old", -1)
    run.add(penalty, "skillstore", judged_bad)

    proposed = _candidate(run, judged_bad, config)
    judged = _judged(run, proposed, 2)
    (published,) = domain.decide(run.log, judged)
    target = next(t for t in trigger.msg.ranking if t.class_path == QWEN)
    assert published.skill_id == skill_id_for("row_reduction", config)
    assert published.fingerprint == target.fingerprint and published.config == config
    assert (published.reward, published.candidate_id) == (2, "c1")
    run.add(published, "skillstore", judged)

    concluded = run.add(pb.TargetConcluded(target_class=QWEN, candidate_id="c1", reward=2, swap=True), "coder", judged)
    committed = pb.SwapCommitted(swap_id="s1", candidate_id="c1", target_class=QWEN, modules_patched=57)
    swap = run.add(committed, "server", concluded)
    (credit,) = domain.decide(run.log, swap)
    assert (credit.skill_id, credit.reward) == (published.skill_id, 2)
    run.add(credit, "skillstore", swap)

    # The kernel raised while serving: the server asked itself to roll it back, and the skill pays for it.
    failure = "ValueError: 40 rows: more than this kernel was written for"
    asked = run.add(pb.RollbackRequested(swap_id="s1", reason="the kernel raised", failure=failure), "server", swap)
    rolled_back = pb.SwapRolledBack(swap_id="s1", candidate_id="c1", reason="rolled back 57 modules")
    rolled = run.add(rolled_back, "server", asked)
    (debit,) = domain.decide(run.log, rolled)
    assert (debit.skill_id, debit.reward) == (published.skill_id, -1) and "failed while serving" in debit.reason
    run.add(debit, "skillstore", rolled)

    injected = ("CandidateProposed", "CandidateJudged", "TargetConcluded", "SwapCommitted", "SwapRolledBack")
    rederivers = {**domain.REDERIVE, **profiler_domain.REDERIVE}
    rederivers |= {t: (lambda prior, trigger, recorded, ordinal=0: recorded) for t in injected}
    assert verify(run.log, rederivers) == []


def test_an_operators_rollback_debits_no_skill(new_run, profiled, config):
    run = new_run()
    trigger = profiled(run, QWEN, 1536)
    proposed = _candidate(run, trigger, config, skill_id="sk-old")
    judged = _judged(run, proposed, 2)
    swap = run.add(pb.SwapCommitted(swap_id="s1", candidate_id="c1", target_class=QWEN), "server", judged)
    asked = run.add(pb.RollbackRequested(swap_id="s1", reason="operator: p95 regressed"), "cli", swap)
    rolled = run.add(pb.SwapRolledBack(swap_id="s1", candidate_id="c1"), "server", asked)
    assert domain.decide(run.log, rolled) == []


def test_a_rollback_by_the_runs_served_verdict_debits_the_skill_behind_each_swap_since_schema_13(
    new_run, profiled, config
):
    """The profiler rolls every live swap of a run back when the served load got worse after them (its
    RollbackRequested answers the RunCompleted): each skill behind one takes a losing pull. A rollback recorded
    before schema 13 debited nothing, and re-derives so."""
    from services.profiler.served_verdict import ROLLBACK_PREFIX

    run = new_run()
    trigger = profiled(run, QWEN, 1536)
    proposed = _candidate(run, trigger, config, skill_id="sk-old")
    judged = _judged(run, proposed, 2)
    swap = run.add(pb.SwapCommitted(swap_id="s1", candidate_id="c1", target_class=QWEN), "server", judged)
    completed = run.add(pb.RunCompleted(), "profiler", swap)
    reason = f"{ROLLBACK_PREFIX}: throughput at 64 streams 3,804 -> 3,463 tok/s"
    asked = run.add(pb.RollbackRequested(swap_id="s1", reason=reason), "profiler", completed)
    rolled = run.add(pb.SwapRolledBack(swap_id="s1", candidate_id="c1"), "server", asked)
    (debit,) = domain.decide(run.log, rolled)
    assert (debit.skill_id, debit.reward) == ("sk-old", -1)  # the skill the candidate was built from
    assert "rolled back by its run's served verdict" in debit.reason and ROLLBACK_PREFIX in debit.reason, debit.reason

    rolled.env.schema_version = 12  # the same rollback in a run recorded before: no debit, as then
    assert domain.decide(run.log, rolled) == []
    rolled.env.schema_version = ev.SCHEMA_VERSION
    forged = run.add(pb.RollbackRequested(swap_id="s1", reason=reason), "cli", swap)  # its words, not its author
    assert domain.decide(run.log, run.add(pb.SwapRolledBack(swap_id="s1", candidate_id="c1"), "server", forged)) == []


def test_nothing_to_publish_or_credit(new_run, profiled, config):
    run = new_run()
    trigger = profiled(run, QWEN, 1536)
    no_recipe = _candidate(run, trigger, pb.TemplateConfig(), candidate_id="llm1")  # e.g. an LLM's own source
    assert domain.decide(run.log, _judged(run, no_recipe, 3)) == []
    correct = _candidate(run, trigger, config, candidate_id="c2")
    assert domain.decide(run.log, _judged(run, correct, 0)) == []  # not a skill's trial, nothing to remember
    swap = run.add(pb.SwapCommitted(swap_id="s", candidate_id="c2"), "server", trigger)
    assert domain.decide(run.log, swap) == []  # no skill behind it
    unknown = run.add(pb.SwapCommitted(swap_id="s2", candidate_id="nobody"), "server", trigger)
    assert domain.decide(run.log, unknown) == []


async def test_the_next_targets_skills_are_retrieved_when_the_one_before_ends(new_run, observation_of, tmp_path):
    """A run of several targets (schema 5): the skill store answers the end of one with the next one's retrieval,
    and replay re-derives it from the log."""
    from services.core.replay import verify
    from services.profiler import domain as profiler_domain
    from services.skillstore.library import JsonSkillLibrary
    from services.skillstore.service import SkillstoreService

    observed = observation_of("m.NormA", 1536)
    second = observed.modules.add()
    second.CopyFrom(observed.modules[0])
    second.introspection.class_path, second.total_time_us = "m.NormB", 2_000.0
    run = new_run()
    request = run.add(pb.RunRequested(prompts=["hi"], decode_tokens=4), "client")
    captured = run.add(profiler_domain.derive_profile_captured(run.log, request, observed), "profiler", request)
    assert list(captured.msg.targets) == ["m.NormA", "m.NormB"] and "then, in turn: NormB" in captured.msg.reason
    service = SkillstoreService(JsonSkillLibrary(tmp_path / "skills"))
    [first] = await service.handle(captured, run.log)
    assert first.target_class == "m.NormA"
    skills = run.add(first, "skillstore", captured)
    ended = run.add(pb.TargetConcluded(target_class="m.NormA", reward=-1, reason="none passed"), "coder", skills)
    [following] = await service.handle(ended, run.log)
    assert isinstance(following, pb.SkillsRetrieved) and following.target_class == "m.NormB"
    run.add(following, "skillstore", ended)
    last = run.add(pb.TargetConcluded(target_class="m.NormB", reward=-1), "coder")
    assert await service.handle(last, run.log) == []  # no target left: the profiler ends the run
    rederive = {**domain.REDERIVE, **profiler_domain.REDERIVE}
    assert [m for m in verify(run.log, rederive) if m.type in rederive] == []
    one = run.add(pb.RunRequested(prompts=["hi"], decode_tokens=4, max_targets=1), "client")
    assert list(profiler_domain.derive_profile_captured(run.log[-1:], one, observed).targets) == ["m.NormA"]


CONFIG_8 = pb.TemplateConfig(template="row_reduction_onepass", num_warps=8, rows_per_program=1)


def _published(skill_id: str, vector: list[float], reward: int = 1) -> pb.SkillPublished:
    fingerprint = pb.Fingerprint(op_family="row_reduction", vector=vector)
    return pb.SkillPublished(skill_id=skill_id, fingerprint=fingerprint, config=CONFIG_8, reward=reward)


def test_the_library_fold_counts_trials_and_remembers_physics():
    first = domain.evolve_skill(None, _published("sk-a", [0.0, 1.0], reward=2), None)
    assert (first.pulls, first.reward_sum, first.vectors, first.config) == (1, 2.0, ((0.0, 1.0),), CONFIG_8)
    again = domain.evolve_skill(first, _published("sk-a", [0.0, 1.0], reward=3), 2)  # the same physics: kept once
    assert (again.pulls, again.reward_sum, again.vectors) == (2, 5.0, ((0.0, 1.0),))
    assert (first.pulls, first.reward_sum) == (1, 2.0)  # a value: the skill before is untouched
    credited = domain.evolve_skill(again, pb.SkillCredited(skill_id="sk-a", reward=-1), 2)
    assert (credited.pulls, credited.reward_sum) == (3, 4.0)
    assert domain.evolve_skill(None, pb.SkillCredited(skill_id="sk-x", reward=3), 2) is None  # unknown: nothing
    assert domain.evolve_skill(again, pb.SkillsRetrieved(), 2) is again  # not an index event
    refused = domain.evolve_skill(again, _published("sk-a", [1.0, 2.0, 3.0]), 2)
    assert (refused.pulls, refused.vectors) == (3, again.vectors)  # the trial counts, the 3-vector is not indexed
    full = first
    for i in range(domain.MAX_VECTORS_PER_SKILL + 3):
        full = domain.evolve_skill(full, _published("sk-a", [float(i), 0.5]), 2)
    assert len(full.vectors) == domain.MAX_VECTORS_PER_SKILL and full.vectors[0] == (0.0, 1.0)  # oldest kept


def test_nearest_ranks_by_distance_then_id_and_refuses_another_dimension():
    skills = [
        domain.Skill("sk-b", "row_reduction", CONFIG_8, vectors=((1.0, 0.0),)),
        domain.Skill("sk-a", "row_reduction", CONFIG_8, vectors=((0.0, 1.0), (9.0, 9.0))),
        domain.Skill("sk-none", "row_reduction", CONFIG_8),  # no physics: never a neighbour
    ]
    assert [(n.skill_id, n.distance) for n in domain.nearest(skills, [0.0, 0.0], 5, 2)] == [
        ("sk-a", 1.0),
        ("sk-b", 1.0),
    ]
    assert domain.nearest(skills, [0.0, 0.0], 5, None) == []  # a library holding no vector answers nothing
    try:
        domain.nearest(skills, [0.0], 5, 2)
    except domain.WrongDimension as exc:
        assert str(exc) == "cannot look up a fingerprint vector of 1 dimensions; the library holds 2-dimensional ones"
    else:
        raise AssertionError("a 1-vector was compared with 2-vectors")
