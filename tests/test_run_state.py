"""The run state folded from a log: what it keeps, that the first fact counts, and when a run is complete."""

from __future__ import annotations

from runlog import RunLog

from services.core import run_state
from services.core.pb import events_pb2 as pb

NORM = "m.Norm"


def _searched() -> tuple[RunLog, list]:
    run = RunLog()
    request = run.add(pb.RunRequested(model="tiny-qwen2", max_candidates=3), "cli")
    profile = run.add(pb.ProfileCaptured(target_class=NORM), "profiler", request)
    skills = run.add(pb.SkillsRetrieved(target_class=NORM), "skillstore", profile)
    proposals = [
        run.add(pb.CandidateProposed(candidate_id=f"c{k}", target_class=NORM, attempt=k), "coder", skills)
        for k in (1, 2)
    ]
    return run, proposals


def test_the_state_keeps_each_targets_search_in_log_order():
    run, (c1, c2) = _searched()
    run.add(pb.CandidateJudged(candidate_id="c2", reward=2), "judge", c2)
    state = run_state.fold(run.log)
    view = state.target(NORM)
    assert state.request.max_candidates == 3 and state.profile.target_class == NORM
    assert [p.candidate_id for p in view.proposals] == ["c1", "c2"] and view.pending == 1
    assert [j.candidate_id for j in view.judged] == ["c2"] and view.concluded is None
    assert state.proposal("c1").attempt == 1 and state.proposal("c9") is None
    assert run_state.fold(run.log[:-1]).target(NORM).pending == 2  # the state before the verdict


def test_the_first_fact_counts_where_the_log_holds_one_twice():
    run, (c1, _) = _searched()
    run.add(pb.CandidateJudged(candidate_id="c1", reward=-1, reason="first"), "judge", c1)
    run.add(pb.CandidateJudged(candidate_id="c1", reward=3, reason="a later copy"), "judge", c1)
    run.add(pb.CandidateProposed(candidate_id="c1", target_class="other.Norm"), "coder", c1)
    state = run_state.fold(run.log)
    assert state.judged["c1"].reason == "first" and state.proposal("c1").target_class == NORM


def test_a_run_ends_once_at_the_event_its_rule_names():
    run, (c1, _) = _searched()
    kept = run.add(pb.TargetConcluded(target_class=NORM, candidate_id="c1", swap=True), "coder", c1)
    assert run_state.outcome(run_state.fold(run.log), kept) == ""  # the server answers a swapping conclusion
    committed = run.add(pb.SwapCommitted(swap_id="s1", candidate_id="c1", target_class=NORM), "server", kept)
    assert run_state.outcome(run_state.fold(run.log), committed) == "swapped"
    run.add(pb.RunCompleted(outcome="swapped"), "profiler", committed)
    again = run.add(pb.SwapRejected(candidate_id="c1", target_class=NORM), "server", kept)
    assert run_state.outcome(run_state.fold(run.log), again) == ""  # a run ends once

    empty = RunLog()
    request = empty.add(pb.RunRequested(), "cli")
    nothing = empty.add(pb.ProfileCaptured(target_class="", reason="nothing to optimise"), "profiler", request)
    assert run_state.outcome(run_state.fold(empty.log), nothing) == "no_target"
    assert run_state.outcome(run_state.fold(empty.log), request) == ""


def test_several_targets_run_in_turn_and_the_run_ends_with_the_last():
    """Since schema 5 the profile lists every target; each one's end starts the next, the last one's ends the run."""
    mlp = "m.MLP"
    run = RunLog()
    request = run.add(pb.RunRequested(), "cli")
    profile = run.add(pb.ProfileCaptured(target_class=NORM, targets=[NORM, mlp]), "profiler", request)
    assert run_state.targets(run_state.fold(run.log)) == (NORM, mlp)
    assert run_state.next_target(run_state.fold(run.log), profile) == ""  # a profile ends no target
    kept = run.add(pb.TargetConcluded(target_class=NORM, candidate_id="c1", swap=True), "coder", profile)
    assert run_state.next_target(run_state.fold(run.log), kept) == ""  # the server answers it first
    committed = run.add(pb.SwapCommitted(swap_id="s1", candidate_id="c1", target_class=NORM), "server", kept)
    state = run_state.fold(run.log)
    assert run_state.next_target(state, committed) == mlp and run_state.outcome(state, committed) == ""
    last = run.add(pb.TargetConcluded(target_class=mlp, reward=1, swap=False), "coder", committed)
    state = run_state.fold(run.log)
    assert run_state.next_target(state, last) == "" and run_state.outcome(state, last) == "no_swap"

    old = RunLog()  # a profile of schema 4: its one target
    request = old.add(pb.RunRequested(), "cli")
    old.add(pb.ProfileCaptured(target_class=NORM), "profiler", request)
    concluded = old.add(pb.TargetConcluded(target_class=NORM, swap=False), "coder")
    assert run_state.targets(run_state.fold(old.log)) == (NORM,)
    assert run_state.outcome(run_state.fold(old.log), concluded) == "no_swap"
