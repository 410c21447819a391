"""The fenced pass: a GPU judging's cases run again under the interpreter, every tensor against a fence.

A GPU has no fence after a tensor. A kernel that loads past a row's end with no mask reads what follows the tensor
in the same allocation and discards it: its answers are right, and in production, where a tensor can end where a
page does, the same read crashes the server. The CPU judge places every tensor against an inaccessible page
(services.judge.fence), so the read faults there (`memory-fault`).

The dataflow check (services.core.kernel_dataflow) is what makes a CPU run speak for the GPU: no loaded value
reaches an address, a mask, a branch or a loop bound, so a launch's addresses are a function of its shapes,
program ids and constexprs only — the same at the same shape on every device. A GPU judge therefore also runs the
candidate's cases under the interpreter in a CPU child (the CPU judge's own draw: every width of the profile, odd
widths, ragged tails, dispatch edges up to what the interpreter can draw), beside its GPU child; timing waits for
it. A plan dispatching past the rows the interpreter draws runs with those limits lowered (`lowered` says how).

Pure: what a recorded pass says about the verdict. The service runs it (services.judge.service).
"""

from __future__ import annotations

from services.core.pb import events_pb2 as pb

WHERE = "the fenced pass under the interpreter"


def failure(obs: pb.JudgeObservation) -> tuple[str, str, str] | None:
    """(layer, rule, reason) when the recorded fenced pass rejects the candidate; None when it passed or none ran."""
    if not obs.HasField("fenced"):
        return None
    fenced = obs.fenced
    if fenced.sandbox.rule_id:
        return "sandbox", fenced.sandbox.rule_id, f"{fenced.sandbox.error} ({WHERE})"
    cor = fenced.correctness
    if not cor.passed:
        return "correctness", cor.rule_id or "unknown", f"{cor.error or 'not run'} ({WHERE})"
    return None


def lowered(plan: pb.LaunchPlan, boundary: int) -> tuple[pb.LaunchPlan, str]:
    """The plan the pass runs, and what it changed ("" when nothing): every dispatch limit at or above `boundary`
    (the most rows or positions the interpreter draws both sides of, the family's CPU_BOUNDARY) moved below it, in
    order, so that every launch of the plan runs fenced — a launch's addresses depend on the shapes it is called at,
    not on which limit routed the call there. What it cannot show: an address that steps outside a tensor only at
    counts the interpreter never reaches (a shape divided by a fixed number, say)."""
    moved, out = [], pb.LaunchPlan()
    out.CopyFrom(plan)
    floor = 0  # the limits stay strictly rising
    for launch in out.launches:
        limit = int(launch.max_rows)
        if limit and limit >= boundary:
            new = max(floor + 1, boundary // 2 + len(moved))
            moved.append(f"{limit} -> {new}")
            launch.max_rows = new
        floor = int(launch.max_rows) or floor
    if not moved:
        return out, ""
    return out, (
        f"dispatch limits above the interpreter's {boundary} were run lowered ({', '.join(moved)}): every launch ran "
        "fenced, at the counts the interpreter draws, not at the ones past the plan's own limits"
    )


def passed(fenced: pb.FencedPass) -> bool:
    """Whether the GPU child may go on to timing."""
    return not fenced.sandbox.rule_id and fenced.correctness.passed


def describe(fenced: pb.FencedPass) -> list[str]:
    """The pass in words, for services.judge.report."""
    state = "passed" if passed(fenced) else "FAILED"
    cor = fenced.correctness
    out = [
        f"fenced pass (interpreter, tensors against inaccessible memory): {state}, {fenced.wall_s:.1f} s, "
        f"exit {fenced.sandbox.exit or '-'}, {cor.checks_passed}/{cor.checks_run} checks, "
        f"shapes {', '.join(cor.shapes)}"
    ]
    if fenced.sandbox.rule_id:
        out.append(f"  {fenced.sandbox.rule_id}: {fenced.sandbox.error}")
    elif cor.error:
        out.append(f"  {cor.rule_id}: {cor.error}")
    if fenced.lowered:
        out.append(f"  lowered: {fenced.lowered}")
    return out
