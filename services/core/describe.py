"""One readable line per event, shared by the CLI (`optimize`, `events`, `replay`) and the TUI."""

from __future__ import annotations

from datetime import UTC, datetime

from google.protobuf.message import Message

from services.core.events import Recorded


def _short(class_path: str) -> str:
    return class_path.rsplit(".", 1)[-1] if class_path else "-"


def _summary(type_name: str, m: Message) -> str:  # noqa: C901 - a flat table of formats
    if type_name == "RunRequested":
        policy = f"{m.policy.name or '-'}(reward>={m.policy.min_reward})"
        return f"model={m.model} policy={policy} max_candidates={m.max_candidates}"
    if type_name == "ProfileCaptured":
        o = m.observed
        top = ", ".join(f"{_short(t.class_path)} {100 * t.time_share:.0f}%" for t in list(m.ranking)[:3])
        return (
            f"{o.hardware.device_name or o.hardware.device} {o.dtype}: {o.decode_tokens_per_s:.1f} tok/s; "
            f"top: {top}; target={_short(m.target_class)}"
        )
    if type_name == "SkillsRetrieved":
        chosen = m.chosen_skill_id or "cold start"
        return f"{len(m.observed.neighbours)} neighbours of {m.observed.library_size} skills; pick: {chosen}"
    if type_name == "CandidateProposed":
        c = m.config
        return (
            f"{m.candidate_id} attempt {m.attempt} origin={m.origin} warps={c.num_warps} rows/prog={c.rows_per_program}"
        )
    if type_name == "CandidateJudged":
        cor = m.observed.correctness
        speed = f" x{m.speedup_vs_eager:.2f} vs eager" if m.speedup_vs_eager else ""
        return f"{m.candidate_id} reward={m.reward:+d} checks {cor.checks_passed}/{cor.checks_run}{speed}: {m.reason}"
    if type_name == "TargetConcluded":
        return f"{_short(m.target_class)} best={m.candidate_id or '-'} reward={m.reward:+d} swap={m.swap}: {m.reason}"
    if type_name == "SwapCommitted":
        p = m.observed
        return (
            f"{m.swap_id} patched {m.modules_patched} modules, parity max err {p.max_abs_err:.2e}, "
            f"tokens equal={m.tokens_equal}"
        )
    if type_name in ("SwapRejected", "SwapRolledBack"):
        return f"{m.candidate_id}: {m.reason}"
    if type_name == "RollbackRequested":
        return f"{m.swap_id}: {m.reason}"
    if type_name == "SkillPublished":
        return f"{m.skill_id} reward={m.reward:+d} family={m.fingerprint.op_family}"
    if type_name == "SkillCredited":
        return f"{m.skill_id} reward={m.reward:+d}"
    if type_name == "RunCompleted":
        return (
            f"{m.outcome}: {m.tokens_per_s_before:.1f} -> {m.tokens_per_s_after:.1f} tok/s "
            f"(x{m.speedup:.2f}), reward={m.reward:+d}"
        )
    if type_name == "RunFailed":
        return m.reason
    if type_name == "RunCancelled":
        return f"by {m.requested_by or '-'}: {m.reason or 'no reason given'}"
    if type_name == "ServerMetrics":
        return f"{m.tokens_per_s:.1f} tok/s p50 {m.p50_latency_ms:.1f} ms, {m.active_swaps} swaps"
    return ""


def describe(rec: Recorded) -> str:
    env = rec.env
    when = datetime.fromtimestamp(env.time_unix_ns / 1e9, tz=UTC).strftime("%H:%M:%S.%f")[:-3]
    try:
        text = _summary(env.type, rec.msg)
    except Exception as exc:  # a describer must never take the CLI down
        text = f"(cannot summarise: {exc})"
    return f"{when} {env.producer:<10} {env.type:<17} {text}"
