"""The server's decisions as pure functions of the run's log and what was observed.

Whether to swap is decided here, from the log (was the candidate judged good enough, under which
policy, with which source) and from the parity observation recorded in the event. The live handler
and `yantra replay --verify` call the same functions, so they cannot disagree.
"""

from __future__ import annotations

from services.core import run_state
from services.core.events import Recorded, all_of, first
from services.core.kernels import candidate_sha256
from services.core.pb import events_pb2 as pb
from services.core.replay import Rederive, from_observed
from services.server import routing

# A candidate judged wrong (-1) is never swapped, whatever a policy says.
MIN_REWARD_FLOOR = 1
# Dtypes whose greedy canary tokens must match exactly (bf16/fp16 ties may flip on honest rounding).
EXACT_TOKEN_DTYPES = ("float32", "float64")


def swap_id_for(trigger: Recorded) -> str:
    """The id of the swap a TargetConcluded may commit: unique per commit, so no other run can reuse it.

    It names the run and the candidate (the candidate fixes the target): `swap-<run>-<candidate>`. A
    TargetConcluded written at schema 1 derived `swap-<candidate>`, which repeated when a later run
    committed the same kernel; replay keeps that rule for those events so old runs still verify.
    """
    concluded: pb.TargetConcluded = trigger.msg
    if trigger.env.schema_version < 2:
        return f"swap-{concluded.candidate_id}"
    return f"swap-{trigger.env.run_id}-{concluded.candidate_id}"


def required_reward(prior: list[Recorded], concluded: pb.TargetConcluded) -> int:
    """The strictest of the run's recorded policy, the conclusion's policy and the floor."""
    levels = [MIN_REWARD_FLOOR]
    if concluded.HasField("policy"):
        levels.append(concluded.policy.min_reward)
    request = first(prior, "RunRequested")
    if request is not None and request.msg.HasField("policy"):
        levels.append(request.msg.policy.min_reward)
    return max(levels)


def _judgement(prior: list[Recorded], concluded: pb.TargetConcluded) -> pb.CandidateJudged | None:
    """The run's verdict on the concluded candidate, when it judged this very source (the first verdict counts)."""
    judged = run_state.fold(prior).judged.get(concluded.candidate_id)
    return judged if judged is not None and judged.source_sha256 == concluded.source_sha256 else None


def judged_ok(prior: list[Recorded], concluded: pb.TargetConcluded) -> bool:
    """The run's CandidateJudged for this candidate, with this source hash, is at or above the policy."""
    if not concluded.candidate_id:
        return False
    judged = _judgement(prior, concluded)
    return judged is not None and judged.reward >= required_reward(prior, concluded)


CUDA_GRAPH = "cuda-graph"  # the judge's capability (services.judge.reward.capabilities)


def graph_problem(prior: list[Recorded], concluded: pb.TargetConcluded, observed: pb.ParityObservation) -> str:
    """Why a server serving through CUDA graphs must refuse this kernel: the judge never saw it run in one; ""
    when it did, or when the server serves eagerly (YANTRA_GRAPHS=0 is the explicit way to serve such a kernel)."""
    if not observed.graphs:
        return ""
    judged = _judgement(prior, concluded)
    if judged is not None and CUDA_GRAPH in judged.capabilities:
        return ""
    return (
        "this server decodes through CUDA graphs and the judge never captured this kernel in one (judged on a CPU, "
        "untimed, or its capture failed); serve it eagerly with YANTRA_GRAPHS=0, or judge it on a GPU"
    )


FASTER = 1.05  # the judge's margin (services.judge.reward): within it, host times are the same


def host_problem(prior: list[Recorded], concluded: pb.TargetConcluded, observed: pb.ParityObservation) -> str:
    """Why a server serving eagerly must refuse this kernel: the judge timed its whole call slower than eager's
    host-inclusive (its launch costs more than the op it replaces); "" when it was not, or the server serves
    through CUDA graphs (where the host's time is not paid per call)."""
    if observed.graphs:
        return ""
    judged = _judgement(prior, concluded)
    if judged is None:
        return ""
    slower = [
        f"{row.shape} ({row.candidate_host_us:.1f} vs {row.eager_host_us:.1f} us)"
        for row in judged.observed.timing.rows
        if row.candidate_host_us > 0 and row.eager_host_us > 0 and row.candidate_host_us > FASTER * row.eager_host_us
    ]
    if not slower:
        return ""
    return (
        f"this server launches eagerly and the judge timed the kernel slower than eager host-inclusive at "
        f"{', '.join(slower)}: it would slow every call; serve through CUDA graphs (YANTRA_GRAPHS unset)"
    )


def serving_plan(prior: list[Recorded], concluded: pb.TargetConcluded) -> routing.ServingPlan:
    """Where the concluded kernel serves once swapped: lane by lane and row range by row range, where the run's verdict
    did not time it slower than eager (services.server.routing). A pure function of recorded events (the verdict's
    timing and the proposal's op family), so the live swap, a restart and `yantra swaps` derive the same plan, and a
    swap recorded before routing existed is served by the plan its verdict implies."""
    proposed = find_proposed(prior, concluded.candidate_id)
    return routing.plan_for(_judgement(prior, concluded), proposed.plan.family if proposed else "")


def committed_plan(run_log: list[Recorded], committed: Recorded) -> routing.ServingPlan | None:
    """The serving plan of a recorded SwapCommitted, from the conclusion it answered; None when the log lacks it."""
    concluded = next((r for r in run_log if r.env.event_id == committed.env.causation_id), None)
    if concluded is None or concluded.type != "TargetConcluded":
        return None
    return serving_plan([r for r in run_log if r.seq < concluded.seq], concluded.msg)


def idle_problem(plan: routing.ServingPlan, observed: pb.ParityObservation) -> str:
    """Why a server must refuse a kernel whose plan leaves it no call in any lane this server serves (the graph lane
    only when it serves through graphs; eager calls always: a prefill too large for a graph); "" when it has some."""
    lanes = [plan.graph, plan.eager] if observed.graphs else [plan.eager]
    if any(not lane.nowhere for lane in lanes):
        return ""
    said = plan.describe(observed.graphs)
    return f"the judge timed the kernel slower than eager in every lane this server serves ({said}): it serves no call"


def lane_problem(
    prior: list[Recorded], concluded: pb.TargetConcluded, observed: pb.ParityObservation, schema_version: int
) -> str:
    """Why this server must refuse the kernel for the way it serves, decided before anything is imported: a graph
    server and a kernel never captured in a graph; a routing server (observed.routed) and a kernel that would serve no
    call; before routing (since schema 5), an eager server and a kernel slower host-inclusive at some shape."""
    problem = graph_problem(prior, concluded, observed)
    if problem:
        return problem
    if observed.routed:
        return idle_problem(serving_plan(prior, concluded), observed)
    return host_problem(prior, concluded, observed) if schema_version >= 5 else ""


def find_proposed(prior: list[Recorded], candidate_id: str) -> pb.CandidateProposed | None:
    return run_state.fold(prior).proposal(candidate_id)


def log_problems(prior: list[Recorded], concluded: pb.TargetConcluded) -> list[str]:
    """Why the log itself forbids swapping this candidate; empty when it allows it."""
    cid = concluded.candidate_id
    if not cid:
        return ["the conclusion names no candidate"]
    proposed = find_proposed(prior, cid)
    if proposed is None:
        return [f"no CandidateProposed {cid} in the run"]
    out = []
    actual = candidate_sha256(proposed.source, proposed.plan)
    if not (actual == proposed.source_sha256 == concluded.source_sha256):
        out.append(
            f"candidate hash mismatch: its source and plan hash to {actual[:12]}, the conclusion names "
            f"{concluded.source_sha256[:12]}"
        )
    if not judged_ok(prior, concluded):
        out.append(f"no CandidateJudged for {cid} with this source and reward >= {required_reward(prior, concluded)}")
    if concluded.target_class and proposed.contract.target != concluded.target_class:
        out.append(f"the contract targets {proposed.contract.target} but the run concluded on {concluded.target_class}")
    return out


def _tokens_equal(observed: pb.ParityObservation) -> bool:
    before, after = list(observed.canary_tokens_before), list(observed.canary_tokens_after)
    return bool(before) and before == after


def _sweep_problem(observed: pb.ParityObservation) -> str:
    wrong = ", ".join(str(t) for t in observed.sweep_wrong_tokens)
    top = observed.sweep_max_position
    where = f"positions 0-{top}" if top else "position 0"
    if observed.sweep_recurring_tokens:
        where += f", then a prompt of {observed.sweep_recurring_tokens} recurring"
    return (
        f"vocabulary sweep at {where}: {observed.sweep_calls_passed}/{observed.sweep_calls_checked} calls over "
        f"{observed.sweep_tokens} tokens within tolerance (max abs err {observed.sweep_max_abs_err:.3g}); wrong on "
        f"token{'s' if len(observed.sweep_wrong_tokens) > 1 else ''} {wrong or '?'}"
    )


def parity_problems(observed: pb.ParityObservation) -> list[str]:
    """Why the live checks forbid the swap; empty when every check passed."""
    out = []
    if observed.error:
        out.append(observed.error)
    if observed.sweep_calls_passed != observed.sweep_calls_checked:  # found before anything was patched
        return [*out, _sweep_problem(observed)]
    if not observed.static_ok:
        out.append("the static check did not pass")
    if observed.modules_matched == 0:
        out.append("no live module was patched")
    elif not observed.error:
        checked, passed = observed.activations_checked, observed.activations_passed
        if checked == 0 or passed != checked:
            out.append(
                f"parity: {passed}/{checked} recorded live calls within tolerance "
                f"(max abs err {observed.max_abs_err:.3g})"
            )
        if not observed.canary_tokens_before:
            out.append("the canary did not run")
        elif not observed.canary_logit_max_diff <= observed.canary_logit_tolerance:  # NaN fails too
            out.append(
                f"canary logits moved by {observed.canary_logit_max_diff:.3g} "
                f"> tolerance {observed.canary_logit_tolerance:.3g}"
            )
        if observed.served_lane and not observed.served_logit_max_diff <= observed.canary_logit_tolerance:
            out.append(
                f"canary logits on the served lane ({observed.served_lane}) moved by "
                f"{observed.served_logit_max_diff:.3g} > tolerance {observed.canary_logit_tolerance:.3g}"
            )
        if observed.dtype in EXACT_TOKEN_DTYPES and observed.canary_tokens_before and not _tokens_equal(observed):
            out.append(f"canary greedy tokens changed in {observed.dtype}")
    return out


def swap_outcome(
    prior: list[Recorded], trigger: Recorded, observed: pb.ParityObservation
) -> pb.SwapCommitted | pb.SwapRejected:
    """Commit iff the log allows the candidate and every live check passed; otherwise reject, saying why."""
    concluded: pb.TargetConcluded = trigger.msg
    problems = log_problems(prior, concluded)
    if observed.judged_ok != judged_ok(prior, concluded):
        problems.append("the recorded judged_ok disagrees with the log")
    graphs = lane_problem(prior, concluded, observed, trigger.env.schema_version)
    if graphs:
        return pb.SwapRejected(
            candidate_id=concluded.candidate_id, target_class=concluded.target_class, reason=graphs, observed=observed
        )
    problems += parity_problems(observed)
    proposed = find_proposed(prior, concluded.candidate_id)
    target = concluded.target_class or (proposed.contract.target if proposed else "")
    if problems:
        return pb.SwapRejected(
            candidate_id=concluded.candidate_id,
            target_class=target,
            reason="; ".join(problems),
            observed=observed,
        )
    # a server that routes records where the kernel serves; one recorded before served it on every call
    serving = routing.to_lanes(serving_plan(prior, concluded)) if observed.routed else []
    return pb.SwapCommitted(
        swap_id=swap_id_for(trigger),
        candidate_id=concluded.candidate_id,
        target_class=target,
        modules_patched=observed.modules_matched,
        source_sha256=concluded.source_sha256,
        observed=observed,
        tokens_equal=_tokens_equal(observed),
        serving=serving,
    )


def rollback_outcome(prior: list[Recorded], trigger: Recorded, observed: pb.ParityObservation) -> pb.SwapRolledBack:
    """What a RollbackRequested came to: the swap restored, or nothing to restore and why."""
    request: pb.RollbackRequested = trigger.msg
    committed = [r.msg for r in all_of(prior, "SwapCommitted")]
    match = next((c for c in committed if c.swap_id == request.swap_id), None)
    candidate = match.candidate_id if match else request.swap_id.removeprefix("swap-")
    wanted = request.reason or "requested"
    if observed.error or observed.modules_matched == 0:
        reason = f"nothing rolled back ({wanted}): {observed.error or 'no module was restored'}"
    else:
        reason = f"rolled back {observed.modules_matched} modules: {wanted}"
    return pb.SwapRolledBack(swap_id=request.swap_id, candidate_id=candidate, reason=reason, observed=observed)


def reapply_outcome(prior: list[Recorded], trigger: Recorded, observed: pb.ParityObservation) -> pb.SwapReapplied:
    """What re-applying the swap `trigger` (a SwapCommitted) came to on a restarted server: the same rules as
    the first commit (the log still vouches for the candidate, every live check passed), or why not."""
    committed: pb.SwapCommitted = trigger.msg
    concluded = next((r for r in prior if r.env.event_id == trigger.env.causation_id), None)
    if concluded is None or concluded.type != "TargetConcluded":
        problems = ["the log no longer holds the conclusion this swap answered"]
    else:
        problems = log_problems(prior, concluded.msg)
    if observed.error and observed.modules_matched == 0:  # nothing was tried (superseded, say): that is why
        problems.append(observed.error)
    else:
        if concluded is not None and observed.judged_ok != judged_ok(prior, concluded.msg):
            problems.append("the recorded judged_ok disagrees with the log")
        problems += parity_problems(observed)
    if problems:
        reason = "not re-applied: " + "; ".join(problems)
    else:
        reason = (
            f"re-applied on {observed.modules_matched} modules; parity {observed.activations_passed}/"
            f"{observed.activations_checked} recorded calls (max abs err {observed.max_abs_err:.3g})"
        )
    return pb.SwapReapplied(
        swap_id=committed.swap_id,
        candidate_id=committed.candidate_id,
        target_class=committed.target_class,
        restored=not problems,
        reason=reason,
        observed=observed,
    )


REDERIVE: dict[str, Rederive] = {
    "SwapCommitted": from_observed(swap_outcome),
    "SwapRejected": from_observed(swap_outcome),
    "SwapRolledBack": from_observed(rollback_outcome),
    "SwapReapplied": from_observed(reapply_outcome),
}
