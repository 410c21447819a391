"""One readable line per event, shared by the CLI (`optimize`, `events`, `replay`) and the TUI."""

from __future__ import annotations

from datetime import UTC, datetime

from google.protobuf.message import Message

from services.core import served_text
from services.core.events import Recorded

# The noise band of a run's before/after decode ratio (RunCompleted.speedup): how far the ratio moves
# with nothing changed. Both figures are the profiler's one measure: the median of MEASURE_REPEATS (5)
# batch-1 greedy decode passes over the run's prompts, after a warm-up (services/server/engine.py), taken
# once before and once after, minutes apart. Batch-1 decode is host- and launch-bound, so the figure moves
# with the host. Taking that measure again and again on one loaded model, nothing swapped (2026-12-01):
#   GPU (H200): the 1.5B-shaped preset read 59-72 tok/s, consecutive ratios 0.93-1.09, but the first
#     measure of a process sat up to x1.16 below later ones; tiny-qwen2 read consecutive ratios 0.79-1.25;
#     and a recorded no-swap run read x1.26 (bench/results/demo_qwen2.5-1.5b-shape_h200_wall-refused-file.json).
#   CPU: tiny-qwen2 on an idle 16-core host 0.97-1.01; on a shared 2-core host 0.59-1.48.
# A ratio inside the band is no speed claim either way; only one outside it is headlined.
DECODE_NOISE_BAND = {"cuda": 0.30, "cpu": 0.50}
# The device is not recorded (a run from before RunObservation.device): the wider band, so noise is never a claim.
_UNKNOWN_DEVICE_BAND = max(DECODE_NOISE_BAND.values())
_DEVICE_NAMES = {"cuda": "GPU", "cpu": "CPU"}


def noise_band(device: str) -> float:
    return DECODE_NOISE_BAND.get(device, _UNKNOWN_DEVICE_BAND)


def outside_noise(speedup: float, device: str) -> bool:
    """Whether a before/after decode ratio is a measured change rather than the measure's noise."""
    return speedup > 0 and abs(speedup - 1.0) > noise_band(device)


def decode_ratio(speedup: float, device: str) -> str:
    """The ratio with what it may be read as, e.g. 'x0.72, within the ±50% noise band of a CPU decode measure:
    no speed claim' or 'x1.62 faster, outside the ±30% noise band of a GPU decode measure'."""
    if speedup <= 0:
        return "no ratio (no 'before' figure)"
    band = noise_band(device)
    where = f"the ±{band:.0%} noise band of a {_DEVICE_NAMES.get(device, 'GPU or CPU')} decode measure"
    if not outside_noise(speedup, device):
        return f"x{speedup:.2f}, within {where}: no speed claim"
    return f"x{speedup:.2f} {'faster' if speedup > 1 else 'slower'}, outside {where}"


def _hold_parts(p) -> str:
    """' (apply 0.01, replay 0.05, canary 0.21, served_canary 0.40; record_apart 0.20 before it)': where a swap's
    hold went, and the canary recorded in a hold of its own before it; "" for a swap recorded without parts."""
    inside = ", ".join(f"{h.name} {h.seconds:.2f}" for h in p.hold_parts if h.name != "record_apart")
    apart = "".join(f"; record_apart {h.seconds:.2f} before it" for h in p.hold_parts if h.name == "record_apart")
    return f" ({inside}{apart})" if inside or apart else ""


def _sweep_part(p) -> str:
    """'; swept 512 tokens + a 512-token prompt, 60 calls, in 7.1 s': the vocabulary sweep before the patch, in short
    holds of its own (services.server.vocab_sweep); "" where none ran (a run recorded before it, the sweep off)."""
    if not p.sweep_tokens:
        return ""
    prompt = f" + a {p.sweep_recurring_tokens}-token prompt" if p.sweep_recurring_tokens else ""
    return f"; swept {p.sweep_tokens} tokens{prompt}, {p.sweep_calls_checked} calls, in {p.sweep_s:.1f} s"


def _short(class_path: str) -> str:
    return class_path.rsplit(".", 1)[-1] if class_path else "-"


def note_part(note: str, prefix: str) -> str:
    """The part of a ranked target's note (services.profiler.roofline: "; "-separated) that starts with `prefix`,
    "" where none does."""
    return next((part for part in note.split("; ") if part.startswith(prefix)), "")


def _why_not(t, target) -> str:
    """Why a class with more of the time than the chosen target was not chosen."""
    if not t.supported:
        # the profiler's note names what it was seen computing where no template writes that ("no template for
        # mlp_gelu"): more than its family, which may have a template for another variant
        missing = note_part(t.note, "no template for ")
        if missing and not missing.endswith(f" {t.fingerprint.op_family}"):
            return f"has {missing}"
        return "has no template" + (f" ({t.fingerprint.op_family})" if t.fingerprint.op_family else "")
    if t.recoverable_us <= 0:
        return "is already at its roofline floor"
    if target is not None:
        return f"has less recoverable time ({t.recoverable_us:,.0f} us against {target.recoverable_us:,.0f} us)"
    return "was not chosen"


def _profile_line(m: Message) -> str:
    """The top classes by share of the time, most first, and the target; when the target is not the first
    of them, why each class above it was passed over (the ranking itself is by recoverable time)."""
    o = m.observed
    by_share = sorted(m.ranking, key=lambda t: (-t.time_share, t.class_path))
    top = ", ".join(f"{_short(t.class_path)} {100 * t.time_share:.0f}%" for t in by_share[:3])
    line = (
        f"{o.hardware.device_name or o.hardware.device} {o.dtype}: {o.decode_tokens_per_s:.1f} tok/s; "
        f"top by time: {top or '-'}; target={_short(m.target_class)}"
    )
    target = next((t for t in by_share if t.class_path == m.target_class), None) if m.target_class else None
    if target is None:
        return f"{line} ({m.reason})" if m.reason else line
    above = by_share[: by_share.index(target)]
    if not above:
        return line
    why = "; ".join(f"{_short(t.class_path)} {100 * t.time_share:.0f}% {_why_not(t, target)}" for t in above[:3])
    if len(above) > 3:
        why += f"; {len(above) - 3} more"
    return f"{line} {100 * target.time_share:.0f}% ({why})"


def _summary(type_name: str, m: Message) -> str:  # noqa: C901 - a flat table of formats
    if type_name == "RunRequested":
        policy = f"{m.policy.name or '-'}(reward>={m.policy.min_reward})"
        only = f" targets={','.join(m.only_targets)}" if m.only_targets else ""
        return f"model={m.model} policy={policy} max_candidates={m.max_candidates}{only}"
    if type_name == "ProfileCaptured":
        return _profile_line(m)
    if type_name == "SkillsRetrieved":
        chosen = m.chosen_skill_id or "cold start"
        return f"{len(m.observed.neighbours)} neighbours of {m.observed.library_size} skills; pick: {chosen}"
    if type_name == "CandidateProposed":
        c = m.config
        if m.HasField("observed"):  # an LLM's answer: which model, what it cost
            return f"{m.candidate_id} attempt {m.attempt} origin={m.origin} {_author(m.observed)}"
        return (
            f"{m.candidate_id} attempt {m.attempt} origin={m.origin} warps={c.num_warps} rows/prog={c.rows_per_program}"
        )
    if type_name == "CandidateJudged":
        cor = m.observed.correctness
        speed = f" x{m.speedup_vs_eager:.2f} vs eager" if m.speedup_vs_eager else ""
        return f"{m.candidate_id} reward={m.reward:+d} checks {cor.checks_passed}/{cor.checks_run}{speed}: {m.reason}"
    if type_name == "TargetConcluded":
        line = f"{_short(m.target_class)} best={m.candidate_id or '-'} reward={m.reward:+d} swap={m.swap}: {m.reason}"
        return line + (f"; author {_author(m.observed)}" if m.HasField("observed") else "")  # no [ ]: TUI markup
    if type_name == "SwapCommitted":
        p = m.observed
        return (
            f"{m.swap_id} patched {m.modules_patched} modules, parity max err {p.max_abs_err:.2e}, "
            f"tokens equal={m.tokens_equal}"
            + (f", held the model {p.hold_s:.2f} s{_hold_parts(p)}" if p.hold_s else "")
            + _sweep_part(p)
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
        if m.HasField("served"):  # schema 11: the served load, judged by its own intervals (no noise band)
            return f"{m.outcome}: {served_text.brief(m.served)}, reward={m.reward:+d}"
        ratio = decode_ratio(m.speedup, m.observed.device)
        return (
            f"{m.outcome}: {m.tokens_per_s_before:.1f} -> {m.tokens_per_s_after:.1f} tok/s ({ratio}), "
            f"reward={m.reward:+d}"
        )
    if type_name == "SwapReapplied":
        return f"{m.swap_id}: {m.reason}"
    if type_name == "RunFailed":
        return m.reason
    if type_name == "RunCancelled":
        return f"by {m.requested_by or '-'}: {m.reason or 'no reason given'}"
    if type_name == "ServerMetrics":
        return f"{m.tokens_per_s:.1f} tok/s p50 {m.p50_latency_ms:.1f} ms, {m.active_swaps} swaps"
    return ""


def _author(a) -> str:
    """An LLM author's recorded call in a few words (pb.AuthorObservation)."""
    said = f"finish {a.finish_reason}" if a.finish_reason else f"error: {a.error}" if a.error else "no answer"
    return (
        f"{a.provider}/{a.model} request {a.request_sha256[:10]} {said}, "
        f"{a.prompt_tokens}+{a.answer_tokens} tokens, {a.attempts} attempt(s)"
    )


def describe(rec: Recorded) -> str:
    env = rec.env
    when = datetime.fromtimestamp(env.time_unix_ns / 1e9, tz=UTC).strftime("%H:%M:%S.%f")[:-3]
    try:
        text = _summary(env.type, rec.msg)
    except Exception as exc:  # a describer must never take the CLI down
        text = f"(cannot summarise: {exc})"
    return f"{when} {env.producer:<10} {env.type:<17} {text}"
