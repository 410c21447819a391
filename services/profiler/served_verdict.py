"""A run's served before/after and what it decides, pure: each figure of each level compared by its 95% intervals,
and the run's live swaps rolled back when any figure is worse beyond them (issue 27: a run that made TTFT at 16 and
64 streams worse reported a batch-1 ratio 'within the noise band' and kept its kernels).

Worse means disjoint: the after interval lies wholly on the worse side of the before interval (throughput: after's
upper bound below before's lower; a latency: after's lower bound above before's upper). Two measures of one
unchanged server overlap but for about one figure in a few hundred at 95% each, so a rollback is a measured
regression, not the host's noise; an interval that never converged is wide and rolls nothing back by itself.
"""

from __future__ import annotations

from services.core import events as ev
from services.core import served_text
from services.core.events import Recorded
from services.core.pb import events_pb2 as pb
from services.profiler import served_stats

ROLLBACK_PREFIX = "the run's served load is worse after its swaps"
# A policy that makes no speed claim: its kernels run in the Triton interpreter on a CPU, far slower than eager by
# design, so its served figures are recorded and read, but a regression in them rolls nothing back.
UNTIMED_POLICIES = ("cpu-untimed",)


def acts_on(policy: pb.SwapPolicy, device: str) -> bool:
    """Whether a served regression rolls the run's swaps back: on a GPU always; elsewhere unless the run's policy
    is one that makes no speed claim (a CPU test stack may name another policy to exercise the rollback)."""
    return device == "cuda" or policy.name not in UNTIMED_POLICIES


def one_stream_throughput(served: pb.ServedComparison) -> tuple[float, float]:
    """The fewest-streams level's mean throughput before and after: RunCompleted.tokens_per_s_before/after since
    schema 11 (what one user is served at, through the served lane)."""
    if not served.levels:
        return 0.0, 0.0
    level = min(served.levels, key=lambda lv: lv.streams)
    figure = next(f for f in level.figures if f.name == "throughput")
    return figure.before.mean, figure.after.mean


def worse(figure: str, before: pb.ServedInterval, after: pb.ServedInterval) -> bool:
    if before.repeats < 2 or after.repeats < 2:  # no spread measured on one side: nothing can be told from noise
        return False
    if served_stats.HIGHER_IS_BETTER[figure]:
        return after.mean + after.half_width < before.mean - before.half_width
    return after.mean - after.half_width > before.mean + before.half_width


def _failures(streams: int, before: pb.ServedLevel, after: pb.ServedLevel) -> str:
    """A level whose requests failed after the swaps and never before (a refusal, a deadline, a short answer)."""
    failed_before = sum(r.failed for r in before.repeats)
    failed_after, sent_after = sum(r.failed for r in after.repeats), sum(r.requests for r in after.repeats)
    if failed_after and not failed_before:
        return f"requests at {streams} streams: {failed_after} of {sent_after} failed after, none before"
    return ""


def live_swaps(prior: list[Recorded]) -> list[str]:
    """The swaps the run committed that no SwapRolledBack has taken out yet, in commit order."""
    gone = {r.msg.swap_id for r in prior if r.type == "SwapRolledBack"}
    committed = [r.msg.swap_id for r in prior if r.type == "SwapCommitted"]
    return [s for s in dict.fromkeys(committed) if s not in gone]


def compare(
    before: pb.ServedLoadObservation, after: pb.ServedLoadObservation, swaps: list[str], acts: bool = True
) -> pb.ServedComparison:
    """Each level measured both times, figure by figure; `swaps`: the run's live swaps, rolled back on a regression
    when `acts` (acts_on)."""
    plan = before.plan
    out = pb.ServedComparison()
    after_levels = {lv.streams: lv for lv in after.levels}
    for lv_before in before.levels:
        lv_after = after_levels.get(lv_before.streams)
        if lv_after is None:
            continue  # the same plan measures the same levels; a level missing after is not compared
        cmp = pb.ServedLevelComparison(streams=lv_before.streams)
        b, a = served_stats.level_intervals(lv_before, plan), served_stats.level_intervals(lv_after, plan)
        for name in served_stats.FIGURES:
            fig = pb.ServedFigure(name=name, before=b[name], after=a[name], worse=worse(name, b[name], a[name]))
            cmp.figures.append(fig)
            if fig.worse:
                out.regressions.append(served_text.figure_line(fig, lv_before.streams))
        failed = _failures(lv_before.streams, lv_before, lv_after)
        if failed:
            out.regressions.append(failed)
        out.levels.append(cmp)
    levels = ", ".join(str(lv.streams) for lv in out.levels)
    if not out.regressions:
        unconverged = sum(1 for lv in out.levels for f in lv.figures if not (f.before.converged and f.after.converged))
        note = f" ({unconverged} of {3 * len(out.levels)} figures unconverged)" if unconverged else ""
        out.verdict = f"kept: no served figure worse beyond its 95% interval at {levels} streams{note}"
    elif swaps and not acts:
        out.verdict = f"kept, the policy making no speed claim (kernels untimed on a CPU): {out.regressions[0]}"
    elif swaps:
        out.rollback_swaps.extend(swaps)
        more = f" (and {len(out.regressions) - 1} more)" if len(out.regressions) > 1 else ""
        out.verdict = f"rolled back {', '.join(swaps)}: {out.regressions[0]}{more}"
    else:
        out.verdict = f"worse with no live swap of the run to roll back (not its kernels): {out.regressions[0]}"
    return out


def rollback_requests(completed: pb.RunCompleted) -> list[pb.RollbackRequested]:
    """The RollbackRequested of each swap a RunCompleted's verdict rolls back, the regressions as the reason."""
    served = completed.served
    reason = f"{ROLLBACK_PREFIX}: " + "; ".join(served.regressions)
    return [pb.RollbackRequested(swap_id=s, reason=reason) for s in served.rollback_swaps]


def rederive_rollback(prior: list[Recorded], trigger: Recorded, recorded, ordinal: int = 0) -> pb.RollbackRequested:
    """Replay: the profiler's RollbackRequested at `ordinal` of its answers to a RunCompleted."""
    if trigger.type != "RunCompleted":
        raise ValueError(f"the profiler asks a rollback in answer to a RunCompleted, not a {trigger.type}")
    asked = rollback_requests(trigger.msg)
    if ordinal >= len(asked):
        raise ValueError(f"the RunCompleted's verdict rolls back {len(asked)} swaps, not a {ordinal + 1}th")
    return asked[ordinal]


def before_of(prior: list[Recorded]) -> pb.ServedLoadObservation | None:
    """The run's served 'before' (the first profile's), None when it holds none (a run from before schema 11)."""
    profiled = ev.first(prior, "ProfileCaptured")
    if profiled is None or not profiled.msg.observed.HasField("served_before"):
        return None
    return profiled.msg.observed.served_before
