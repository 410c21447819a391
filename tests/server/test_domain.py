"""The server's decisions are pure functions of the log and the observation; replay re-derives them."""

from __future__ import annotations

import pytest
from server_fixtures import as_log, good_observation, swap_run

from services.core import events as ev
from services.core.pb import events_pb2 as pb
from services.server import domain

SOURCE = "def rmsnorm_forward(hidden_states, weight, eps):\n    ...\n"


def _log(**kw):
    log = as_log(swap_run("r1", SOURCE, **kw))
    return log, log[-1]


def test_judged_ok_needs_a_matching_verdict_at_or_above_every_policy():
    log, trigger = _log()
    assert domain.judged_ok(log, trigger.msg)
    log, trigger = _log(reward=1, run_min_reward=2)
    assert not domain.judged_ok(log, trigger.msg)
    log, trigger = _log(judged_sha="0" * 64)
    assert not domain.judged_ok(log, trigger.msg)
    concluded = pb.TargetConcluded()
    concluded.CopyFrom(trigger.msg)
    concluded.candidate_id = ""
    assert not domain.judged_ok(log, concluded)


def test_a_wrong_candidate_is_never_swapped_whatever_the_policy():
    log, trigger = _log(reward=-1, run_min_reward=-5)
    assert domain.required_reward(log, trigger.msg) == domain.MIN_REWARD_FLOOR
    assert not domain.judged_ok(log, trigger.msg)


def test_commit_when_every_check_passed():
    log, trigger = _log()
    out = domain.swap_outcome(log, trigger, good_observation())
    assert isinstance(out, pb.SwapCommitted)
    assert out.swap_id == f"swap-r1-{trigger.msg.candidate_id}" == domain.swap_id_for(trigger)
    assert out.modules_patched == 5 and out.tokens_equal and out.source_sha256 == trigger.msg.source_sha256
    assert out.target_class == trigger.msg.target_class


def test_the_same_kernel_committed_by_two_runs_gets_two_swap_ids():
    """A swap id names one commit: the run and the candidate (which fixes the target)."""
    first, second = _log()[1], as_log(swap_run("r2", SOURCE))[-1]
    assert first.msg.candidate_id == second.msg.candidate_id
    assert domain.swap_id_for(first) != domain.swap_id_for(second)


def test_a_conclusion_written_at_schema_1_keeps_its_old_swap_id_on_replay():
    log, trigger = _log()
    trigger.env.schema_version = 1
    assert domain.swap_id_for(trigger) == f"swap-{trigger.msg.candidate_id}"
    assert domain.swap_outcome(log, trigger, good_observation()).swap_id == f"swap-{trigger.msg.candidate_id}"


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"static_ok": False}, "static check"),
        ({"modules_matched": 0}, "no live module"),
        ({"activations_passed": 19}, "parity: 19/20"),
        ({"activations_checked": 0, "activations_passed": 0}, "parity: 0/0"),
        ({"canary_logit_max_diff": float("nan")}, "canary logits moved"),
        ({"canary_logit_max_diff": 0.5}, "canary logits moved"),
        ({"error": "candidate does not import: SyntaxError"}, "does not import"),
        ({"judged_ok": False}, "disagrees with the log"),
    ],
)
def test_reject_names_the_failed_check(change, why):
    log, trigger = _log()
    observed = good_observation()
    for key, value in change.items():
        setattr(observed, key, value)
    out = domain.swap_outcome(log, trigger, observed)
    assert isinstance(out, pb.SwapRejected) and why in out.reason
    assert out.observed == observed


def test_float32_needs_equal_tokens_but_bf16_lets_the_logit_tolerance_decide():
    log, trigger = _log()
    changed = good_observation("float32")
    changed.canary_tokens_after[3] = 8
    assert "greedy tokens changed" in domain.swap_outcome(log, trigger, changed).reason
    changed.dtype = "bfloat16"
    out = domain.swap_outcome(log, trigger, changed)
    assert isinstance(out, pb.SwapCommitted) and not out.tokens_equal


def test_the_log_itself_can_forbid_the_swap():
    log, trigger = _log(reward=1, run_min_reward=2)
    out = domain.swap_outcome(log, trigger, good_observation())
    assert isinstance(out, pb.SwapRejected) and "reward >= 2" in out.reason
    no_proposal = [r for r in log if r.type != "CandidateProposed"]
    out = domain.swap_outcome(no_proposal, trigger, good_observation())
    assert "no CandidateProposed" in out.reason


def test_rederive_reproduces_the_bytes():
    log, trigger = _log()
    for observed in (good_observation(), pb.ParityObservation(error="boom", dtype="float32")):
        out = domain.swap_outcome(log, trigger, observed)
        again = domain.REDERIVE[type(out).DESCRIPTOR.name](log, trigger, out)
        assert again.SerializeToString(deterministic=True) == out.SerializeToString(deterministic=True)


def test_rollback_outcome_finds_the_candidate_or_says_nothing_was_restored():
    log, trigger = _log()
    committed = domain.swap_outcome(log, trigger, good_observation())
    log.append(
        ev.Recorded(
            5, ev.make_envelope("r1", committed, producer="server", time_ns=5, causation_id=trigger.env.event_id)
        )
    )
    request = pb.RollbackRequested(swap_id=committed.swap_id, reason="operator")
    req = ev.Recorded(6, ev.make_envelope("r1", request, producer="test", time_ns=6, event_id="rb-1"))
    done = domain.rollback_outcome(log + [req], req, pb.ParityObservation(modules_matched=5))
    assert done.candidate_id == committed.candidate_id and "rolled back 5 modules: operator" in done.reason
    missing = domain.rollback_outcome(log + [req], req, pb.ParityObservation(error="swap 'x' is unknown"))
    assert missing.reason.startswith("nothing rolled back (operator)")


def test_a_server_serving_through_graphs_refuses_a_kernel_never_captured_in_one():
    from server_fixtures import as_log, swap_run

    envelopes = swap_run("graphs-run", SOURCE)
    log = as_log(envelopes)
    trigger = log[-1]
    observed = good_observation()
    assert domain.graph_problem(log[:-1], trigger.msg, observed) == ""  # eager serving: no rule
    observed.graphs = True
    problem = domain.graph_problem(log[:-1], trigger.msg, observed)
    assert "never captured this kernel in one" in problem and "YANTRA_GRAPHS=0" in problem
    out = domain.swap_outcome(log[:-1], trigger, observed)
    assert isinstance(out, pb.SwapRejected) and out.reason == problem
    env = next(e for e in envelopes if e.type == "CandidateJudged")
    judged = pb.CandidateJudged.FromString(env.payload)
    judged.capabilities.append(domain.CUDA_GRAPH)  # the judge captured it on a GPU
    env.payload = judged.SerializeToString()
    log = as_log(envelopes)
    assert domain.graph_problem(log[:-1], trigger.msg, observed) == ""
    assert isinstance(domain.swap_outcome(log[:-1], trigger, observed), pb.SwapCommitted)


def test_a_kernel_whose_served_lane_logits_move_is_rejected_even_when_the_eager_canary_passes():
    observed = good_observation()
    assert domain.parity_problems(observed) == []
    observed.served_lane, observed.served_logit_max_diff = "graphs", observed.canary_logit_tolerance * 0.5
    assert domain.parity_problems(observed) == []
    observed.served_logit_max_diff = observed.canary_logit_tolerance * 2
    (problem,) = domain.parity_problems(observed)
    assert problem.startswith("canary logits on the served lane (graphs) moved by")
    observed.served_logit_max_diff = float("nan")
    assert domain.parity_problems(observed)


def test_an_eager_server_refuses_a_kernel_the_judge_timed_slower_than_eager_host_inclusive():
    """Since schema 5 the judge lets GPU time decide for a kernel captured in graphs; a server that launches
    eagerly pays the host's time per call, so it checks the judge's host-inclusive figures itself."""
    envelopes = swap_run("eager-run", SOURCE)
    env = next(e for e in envelopes if e.type == "CandidateJudged")
    judged = pb.CandidateJudged.FromString(env.payload)
    judged.observed.timing.rows.add(shape="1x1x1536", candidate_us=1.4, eager_us=3.3, candidate_host_us=33.0,
                                    eager_host_us=24.0)  # fmt: skip
    env.payload = judged.SerializeToString()
    log = as_log(envelopes)
    trigger = log[-1]
    observed = good_observation()
    problem = domain.host_problem(log[:-1], trigger.msg, observed)
    assert "slower than eager host-inclusive at 1x1x1536 (33.0 vs 24.0 us)" in problem
    out = domain.swap_outcome(log[:-1], trigger, observed)
    assert isinstance(out, pb.SwapRejected) and out.reason == problem
    observed.graphs = True  # through graphs the host's time is not paid per call (the graph rule still applies)
    assert domain.host_problem(log[:-1], trigger.msg, observed) == ""
    trigger.env.schema_version = 4  # a conclusion written before the rule re-derives as it was
    assert isinstance(domain.swap_outcome(log[:-1], trigger, good_observation()), pb.SwapCommitted)
