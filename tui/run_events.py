"""How each event type changes a run's view (pure): one small function per type.

Times are the events' envelope times, never a clock, so a replay computes the very same view.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from google.protobuf.message import Message

from services.core import served_text
from services.core.events import Recorded
from services.core.lineage import author_of, verdict_of
from tui import figures
from tui.views import STEP_NAMES, CandidateView, Mark, ProfileView, RunView, TargetRow


def _set_step(run: RunView, name: str, status: str, at_ns: int, reason: str | None = None) -> RunView:
    steps = list(run.steps)
    i = STEP_NAMES.index(name)
    old = steps[i]
    started = old.started_ns or at_ns
    ended = at_ns if status in ("done", "failed", "skipped") else 0
    steps[i] = replace(
        old, status=status, started_ns=started, ended_ns=ended, reason=old.reason if reason is None else reason
    )
    return replace(run, steps=tuple(steps))


def _with_candidate(run: RunView, candidate_id: str, change: Callable[[CandidateView], CandidateView]) -> RunView:
    cands = list(run.candidates)
    for i, c in enumerate(cands):
        if c.candidate_id == candidate_id:
            cands[i] = change(c)
            return replace(run, candidates=tuple(cands))
    return replace(run, candidates=(*cands, change(CandidateView(candidate_id))))


def _mark(run: RunView, kind: str, at_ns: int, label: str, lineage: str = "") -> RunView:
    return replace(run, marks=(*run.marks, Mark(at_ns, kind, run.run_id, label, lineage)))


def judged_dtype_bytes(run: RunView, judged: Message) -> int:
    """Bytes per element of the judged dtype; else of the chosen target as the profiler saw it."""
    name = judged.observed.correctness.dtype or (run.profile.dtype if run.profile else "")
    known = figures.DTYPE_BYTES.get(name.removeprefix("torch."), 0)
    chosen = next((t for t in run.targets if t.chosen), None)
    return known or (chosen.dtype_bytes if chosen else 0)


# ------------------------------------------------------------------ one function per event type


def _run_requested(run: RunView, m: Message, t: int) -> RunView:
    policy = f"{m.policy.name or 'unnamed'} (reward >= {m.policy.min_reward})" if m.HasField("policy") else "-"
    run = replace(run, model=m.model, policy=policy, requested_ns=t, status="profiling")
    return _set_step(run, "profile", "running", t, f"profiling {len(m.prompts)} prompts on the live server")


def _profile_captured(run: RunView, m: Message, t: int) -> RunView:
    o = m.observed
    hw = o.hardware
    profile = ProfileView(
        hw.device, hw.device_name, o.dtype, hw.peak_bytes_per_s, hw.calibrated, o.captured_time_us,
        o.decode_tokens_per_s, o.time_source,
    )  # fmt: skip
    targets = tuple(
        TargetRow(
            class_path=r.class_path,
            time_share=r.time_share,
            measured_us=r.time_share * o.captured_time_us,
            floor_us=r.floor_us,
            recoverable_us=r.recoverable_us,
            op_family=r.fingerprint.op_family,
            memory_bound=r.fingerprint.memory_bound,
            arithmetic_intensity=r.fingerprint.arithmetic_intensity,
            achieved_fraction=r.fingerprint.achieved_fraction,
            dtype_bytes=r.fingerprint.dtype_bytes,
            supported=r.supported,
            chosen=r.class_path in (set(m.targets) or {m.target_class} - {""}),  # every target of the run
            note=r.note,
        )
        for r in m.ranking
    )
    run = replace(
        run, profile=profile, targets=targets, target_class=m.target_class, tokens_per_s_before=o.decode_tokens_per_s
    )
    reason = m.reason or f"target {figures.short_class(m.target_class)}"
    run = _set_step(run, "profile", "done", t, reason)
    if not m.target_class:
        for name in STEP_NAMES[1:]:
            run = _set_step(run, name, "skipped", t, "no target to optimise")
        return replace(run, status="no target")
    run = _set_step(run, "retrieve", "running", t, "looking up skills by fingerprint")
    return replace(run, status="retrieving")


def _skills_retrieved(run: RunView, m: Message, t: int) -> RunView:
    pick = m.chosen_skill_id or "cold start"
    reason = m.reason or f"{len(m.observed.neighbours)} neighbours of {m.observed.library_size}; pick {pick}"
    run = _set_step(run, "retrieve", "done", t, reason)
    run = _set_step(run, "candidates", "running", t, "writing the first kernel")
    return replace(run, status="coding")


def _origin_detail(m: Message) -> str:
    if m.origin == "skill" and m.skill_id:
        return m.skill_id
    c = m.config
    return f"{c.template or '?'} w{c.num_warps} r{c.rows_per_program}" if m.HasField("config") else ""


def _candidate_proposed(run: RunView, m: Message, t: int, rec: Recorded) -> RunView:
    def change(c: CandidateView) -> CandidateView:
        return replace(c, attempt=m.attempt, origin=m.origin, origin_detail=_origin_detail(m), proposed=rec)

    run = _with_candidate(run, m.candidate_id, change)
    reason = f"{len(run.candidates)} proposed; latest {m.candidate_id} from {m.origin or '?'} {_origin_detail(m)}"
    run = _set_step(run, "candidates", "running", t, reason.strip())
    run = _set_step(run, "verdicts", "running", t, f"judging {m.candidate_id}")
    return replace(run, status="judging")


def _candidate_judged(run: RunView, m: Message, t: int, rec: Recorded) -> RunView:
    o = m.observed
    rows = list(o.timing.rows) if o.timing.measured else []
    peak = run.profile.peak_bytes_per_s if run.profile else 0.0
    chosen = next((x for x in run.targets if x.chosen), None)
    bandwidth = None
    if chosen is None or chosen.memory_bound:  # % of copy bandwidth says nothing about a compute-bound op
        bandwidth = figures.copy_bandwidth_fraction(rows, judged_dtype_bytes(run, m), peak)

    def change(c: CandidateView) -> CandidateView:
        return replace(
            c,
            judged=rec,
            reward=m.reward,
            checks=f"{o.correctness.checks_passed}/{o.correctness.checks_run}",
            max_abs_err=o.correctness.max_abs_err if o.correctness.checks_run else None,
            vs_eager=figures.speedup_over(rows, "eager_us"),
            vs_compile=figures.speedup_over(rows, "compile_us"),
            vs_native=figures.speedup_over(rows, "native_us"),
            copy_fraction=bandwidth,
            timed=bool(rows),
            rejection=figures.rejection_reason(m),
        )

    run = _with_candidate(run, m.candidate_id, change)
    judged = [c for c in run.candidates if c.reward is not None]
    best = max(judged, key=lambda c: (c.reward, c.vs_eager or 0.0))
    speed = f" {figures.fmt_ratio(best.vs_eager)} vs eager" if best.vs_eager else ""
    reason = f"{len(judged)} judged; best {best.candidate_id} reward {best.reward:+d}{speed}"
    run = _set_step(run, "verdicts", "running", t, reason)
    return replace(run, status="coding")


def _target_concluded(run: RunView, m: Message, t: int) -> RunView:
    run = _set_step(run, "candidates", "done", t, f"{len(run.candidates)} proposed")
    run = _set_step(run, "verdicts", "done", t, m.reason or f"best {m.candidate_id or '-'} reward {m.reward:+d}")
    run = replace(run, reward=m.reward)
    if m.swap:
        why = f"reward {m.reward:+d} >= policy {m.policy.min_reward}: asking the server to swap {m.candidate_id}"
        return replace(_set_step(run, "swap", "running", t, why), status="swapping")
    return replace(_set_step(run, "swap", "skipped", t, m.reason or "not swapped"), status="concluded")


def _swap_committed(run: RunView, m: Message, t: int) -> RunView:
    p = m.observed
    reason = (
        f"{m.swap_id}: patched {m.modules_patched} modules; parity max err {p.max_abs_err:.1e}; "
        f"tokens equal {m.tokens_equal}"
    )
    swapped = next((c for c in run.candidates if c.candidate_id == m.candidate_id), None)
    proposed = swapped.proposed.msg if swapped and swapped.proposed else None
    judged = swapped.judged.msg if swapped and swapped.judged else None
    lineage = f"by {author_of(proposed)}, judged {verdict_of(judged)}"  # what `yantra swaps` says of it
    run = _set_step(run, "swap", "done", t, f"{reason}; {lineage}")
    run = _with_candidate(run, m.candidate_id, lambda c: replace(c, swap="committed"))
    run = _mark(run, "swap", t, f"{figures.short_class(m.target_class)} {m.candidate_id}", lineage)
    return replace(run, status="re-measuring")


def _swap_rejected(run: RunView, m: Message, t: int) -> RunView:
    run = _set_step(run, "swap", "failed", t, f"rejected: {m.reason}")
    run = _with_candidate(run, m.candidate_id, lambda c: replace(c, swap="rejected"))
    return replace(run, status="swap rejected")


def _swap_rolled_back(run: RunView, m: Message, t: int) -> RunView:
    run = _set_step(run, "swap", "failed", t, f"rolled back {m.swap_id}: {m.reason}")
    run = _with_candidate(run, m.candidate_id, lambda c: replace(c, swap="rolled back"))
    run = _mark(run, "rollback", t, f"{m.swap_id} {m.candidate_id}")
    return replace(run, status="rolled back")


def _rollback_requested(run: RunView, m: Message, t: int) -> RunView:
    return replace(
        _set_step(run, "swap", "running", t, f"rollback of {m.swap_id} requested: {m.reason}"), status="rolling back"
    )


def _run_completed(run: RunView, m: Message, t: int) -> RunView:
    for s in run.steps:
        if s.status in ("waiting", "running"):
            run = _set_step(run, s.name, "skipped", t, f"run ended: {m.outcome}")
    return replace(
        run,
        status="done",
        outcome=m.outcome,
        reward=m.reward,
        target_class=m.target_class or run.target_class,
        tokens_per_s_before=m.tokens_per_s_before,
        tokens_per_s_after=m.tokens_per_s_after,
        speedup=m.speedup,
        served=tuple(served_text.run_lines(m)),
        served_worse=bool(m.served.regressions),
    )


def _stop(run: RunView, t: int, outcome: str, why: str, step_status: str) -> RunView:
    """A run ended early: the step that was running gets `step_status`, the rest are skipped."""
    for s in run.steps:
        if s.status == "running":
            run = _set_step(run, s.name, step_status, t, why)
        elif s.status == "waiting":
            run = _set_step(run, s.name, "skipped", t, f"run {outcome}")
    return replace(run, status=outcome, outcome=outcome)


def _run_failed(run: RunView, m: Message, t: int) -> RunView:
    return _stop(run, t, "failed", m.reason, "failed")


def _run_cancelled(run: RunView, m: Message, t: int) -> RunView:
    return _stop(run, t, "cancelled", f"cancelled: {m.reason or 'no reason given'}", "skipped")


_PLAIN = {
    "RunRequested": _run_requested,
    "ProfileCaptured": _profile_captured,
    "SkillsRetrieved": _skills_retrieved,
    "TargetConcluded": _target_concluded,
    "SwapCommitted": _swap_committed,
    "SwapRejected": _swap_rejected,
    "SwapRolledBack": _swap_rolled_back,
    "RollbackRequested": _rollback_requested,
    "RunCompleted": _run_completed,
    "RunFailed": _run_failed,
    "RunCancelled": _run_cancelled,
}
_WITH_RECORD = {"CandidateProposed": _candidate_proposed, "CandidateJudged": _candidate_judged}


def apply_run_event(run: RunView, rec: Recorded, msg: Message) -> RunView:
    """The run after one of its (known) events; types with no part in the pipeline leave it as it is."""
    t = rec.env.time_unix_ns
    if rec.type in _WITH_RECORD:
        return _WITH_RECORD[rec.type](run, msg, t, rec)
    if rec.type in _PLAIN:
        return _PLAIN[rec.type](run, msg, t)
    return run
