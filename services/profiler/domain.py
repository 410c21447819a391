"""The profiler's decisions: which target a profile points at, when a run is complete, and its verdict.

Pure functions of (the run's log up to the trigger, the trigger, what was observed). The live
handler and `yantra replay --verify` call the same functions, so they cannot disagree.
"""

from __future__ import annotations

from services.core import events as ev
from services.core import limits, run_state
from services.core.describe import note_part
from services.core.events import Recorded
from services.core.pb import events_pb2 as pb
from services.core.replay import Rederive, from_observed
from services.profiler import catalogue, served_plan, served_verdict
from services.profiler.roofline import SUPPORTED_FAMILIES, rank

# Used when a RunRequested carries no prompts of its own: short, varied, tokenizer-agnostic.
DEFAULT_PROMPTS = (
    "The quick brown fox jumps over the lazy dog.",
    "Explain in one sentence why the sky is blue.",
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
)
DEFAULT_DECODE_TOKENS = 16
# Decode passes per measurement, 'before' (inside CaptureProfile) and 'after' alike, so the two figures
# come from the same procedure on the same prompts. Median of 5: batch-1 decode is host-bound and one
# pass varied by about ±20% back to back on the H200 box (seen 34.6 -> 29.7 tok/s with one pass each).
MEASURE_REPEATS = 5


def measurement_plan(prior: list[Recorded]) -> tuple[list[str], int]:
    """The prompts and decode length of the run: the same for the profile and for the 'after' measure."""
    req = ev.first(prior, "RunRequested")
    msg = req.msg if req else pb.RunRequested()
    prompts = list(msg.prompts) or list(DEFAULT_PROMPTS)
    return prompts, msg.decode_tokens or DEFAULT_DECODE_TOKENS


def request_problem(request: pb.RunRequested) -> str:
    """Why a RunRequested can never be measured, or asks for more work than a run may (services.core.limits,
    the limit named), whatever model serves it ("" when it can be measured).

    Checked before the server is asked anything: a request of 5,000 prompts held the model for over ten
    minutes. What depends on the model (a prompt longer than its positions) only the server knows; it refuses
    that with INVALID_ARGUMENT, which ends the run the same way.
    """
    problem = limits.prompts_problem(request.prompts)  # first: the count bounds the list of empty ones below
    if problem:
        return problem
    empty = [i + 1 for i, p in enumerate(request.prompts) if not p]
    if empty:
        return f"prompt {', '.join(map(str, empty))} of {len(request.prompts)} is empty"
    prompts = len(request.prompts) or len(DEFAULT_PROMPTS)  # as measurement_plan fills them in
    tokens = request.decode_tokens or DEFAULT_DECODE_TOKENS
    return (
        limits.run_problem(prompts, tokens, request.max_candidates, request.max_targets)
        or limits.targets_problem(list(request.only_targets))
        or served_plan.streams_problem(list(request.served_streams))
    )


# ---------------------------------------------------------------- ProfileCaptured


def _short(class_path: str) -> str:
    return class_path.rsplit(".", 1)[-1]


def _describe(t: pb.RankedTarget) -> str:
    return (
        f"{t.fingerprint.op_family} class {_short(t.class_path)}: {t.time_share:.0%} of the time, "
        f"{t.recoverable_us:,.0f} us recoverable"
    )


def _computes(note: str) -> str:
    return note_part(note, "computes ") or "is not writable"


def choose_target(
    ranking: list[pb.RankedTarget], writable: tuple[str, ...] = catalogue.FROZEN["row_reduction"]
) -> tuple[str, str]:
    """(target class, reason): the supported target with the most recoverable time, explained honestly.
    `writable`: what the templates write, as the reason names it."""
    if not ranking:
        return "", "the profile holds no leaf module class that was called: nothing to optimise"
    top = ranking[0]
    chosen = next((t for t in ranking if t.supported and t.recoverable_us > 0), None)
    if chosen is None:
        at_floor = [t for t in ranking if t.supported]
        if at_floor:
            return "", (
                f"{_short(at_floor[0].class_path)} has a template but is already at its roofline floor; "
                f"{_describe(top)} ranks first"
            )
        known = [t for t in ranking if t.fingerprint.op_family in SUPPORTED_FAMILIES]
        if known:  # recognised, but as something no template writes: say what it was seen computing
            found = "; ".join(f"{_short(t.class_path)} {_computes(t.note)}" for t in known[:3])
            return "", (
                f"no target I can write: {found}, and the template writes {', '.join(writable)} only; "
                f"{_describe(top)} ranks first"
            )
        families = ", ".join(SUPPORTED_FAMILIES)
        return "", f"no leaf class is of a family with a template ({families}); {_describe(top)} ranks first"
    if chosen is top:
        return chosen.class_path, f"chose {_describe(chosen)}; it ranks first of {len(ranking)} leaf classes"
    return chosen.class_path, (
        f"{top.fingerprint.op_family} ranks first with {top.time_share:.0%} of the time but has no template; "
        f"chose {_describe(chosen)}"
    )


def choose_targets(ranking: list[pb.RankedTarget], first: str, limit: int = 0) -> list[str]:
    """Every target the run works on, in ranked order from `first` (choose_target's): each supported one with
    time to recover, at most `limit` (0: all)."""
    if not first:
        return []
    chosen = [first] + [t.class_path for t in ranking if t.supported and t.recoverable_us > 0 and t.class_path != first]
    return chosen[:limit] if limit else chosen


def named(ranking: list[pb.RankedTarget], names: list[str]) -> list[pb.RankedTarget]:
    """The ranked classes a run's `only_targets` names, by full path or by its last part, in ranked order."""
    wanted = {n.strip() for n in names}
    return [t for t in ranking if t.class_path in wanted or _short(t.class_path) in wanted]


def derive_profile_captured(prior: list[Recorded], trigger: Recorded, observed: pb.ProfileObservation):
    ranking = rank(observed)
    # Since schema 5 a run works on several targets in turn; an older run keeps its one target.
    several = trigger.env.schema_version >= 5
    request = ev.first(prior, "RunRequested")
    names = list(request.msg.only_targets) if request else []
    among = named(ranking, names) if names else ranking  # `yantra optimize --target`: those classes alone
    writable = catalogue.writable_variants(observed, trigger.env.schema_version)
    target, reason = choose_target(among, writable)
    if names and not among:
        seen = ", ".join(_short(t.class_path) for t in ranking[:6]) or "none"
        target, reason = "", f"no profiled class is named {', '.join(names)} (the classes that ran: {seen})"
    elif names:
        reason += f" (the run asked for {', '.join(names)} only)"
    msg = pb.ProfileCaptured(ranking=ranking, target_class=target, reason=reason)
    if several:
        msg.targets.extend(choose_targets(among, target, request.msg.max_targets if request else 0))
        if len(msg.targets) > 1:
            msg.reason += f"; then, in turn: {', '.join(_short(t) for t in msg.targets[1:])}"
    msg.observed.CopyFrom(observed)
    return msg


# ---------------------------------------------------------------- RunCompleted


def completes_run(prior: list[Recorded], trigger: Recorded) -> bool:
    """Whether `trigger` is the event that ends this run (so the profiler measures and answers it): the run
    state's rule (services.core.run_state.outcome)."""
    return bool(run_state.outcome(run_state.fold(prior), trigger))


def derive_run_completed(prior: list[Recorded], trigger: Recorded, observed: pb.RunObservation) -> pb.RunCompleted:
    outcome = run_state.OUTCOMES.get(trigger.type)
    if outcome is None:
        raise ValueError(f"a {trigger.type} does not end a run")
    msg = trigger.msg
    profiled = ev.first(prior, "ProfileCaptured")
    concluded = ev.last(prior, "TargetConcluded")
    before = profiled.msg.observed.decode_tokens_per_s if profiled else 0.0
    after = observed.decode_tokens_per_s_after
    target = getattr(msg, "target_class", "")
    if not target and trigger.type != "ProfileCaptured":
        target = concluded.msg.target_class if concluded else (profiled.msg.target_class if profiled else "")
    swapped = trigger.type == "SwapCommitted"
    commits: list[str] = []
    if trigger.env.schema_version >= 5:  # several targets: the run swapped if any of them was committed
        commits = [r.msg.target_class for r in prior if r.type == "SwapCommitted"]  # prior holds the trigger
        commits = list(dict.fromkeys(commits))
        swapped = bool(commits)
        outcome = "swapped" if swapped else outcome
    served = None
    served_before = served_verdict.before_of(prior)
    # Since schema 11 the run's before/after is the served load, judged by its own intervals; a run written before
    # (or one whose profile holds no served figures) keeps the batch-1 decode figures, read against a noise band.
    if trigger.env.schema_version >= 11 and served_before is not None and observed.HasField("served_after"):
        request = ev.first(prior, "RunRequested")
        acts = served_verdict.acts_on(request.msg.policy if request else pb.SwapPolicy(), observed.served_after.device)
        served = served_verdict.compare(served_before, observed.served_after, served_verdict.live_swaps(prior), acts)
        before, after = served_verdict.one_stream_throughput(served)
        if served.rollback_swaps:
            outcome = "rolled_back"
    out = pb.RunCompleted(
        tokens_per_s_before=before,
        tokens_per_s_after=after,
        speedup=after / before if before > 0 else 0.0,
        swapped=swapped,
        outcome=outcome,
        target_class=target,
        reward=concluded.msg.reward if concluded else 0,
        swapped_targets=commits,
    )
    if served is not None:
        out.served.CopyFrom(served)
    out.observed.CopyFrom(observed)
    return out


# ---------------------------------------------------------------- replay


REDERIVE: dict[str, Rederive] = {
    "ProfileCaptured": from_observed(derive_profile_captured),
    "RunCompleted": from_observed(derive_run_completed),
    # the run's own rollback of its swaps for a served regression (schema 11), a pure function of its RunCompleted
    "RollbackRequested": served_verdict.rederive_rollback,
}
