"""Exact replay: re-derive every event of a run from the events before it and compare bytes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from google.protobuf.message import Message

from services.core import events as ev
from services.core import owners
from services.core.events import Recorded

# (log up to and including the trigger, the trigger, the recorded event, its ordinal) -> the event re-derived.
# Fields under `observed` are copied from the recorded event; every other field is recomputed. The ordinal is
# the recorded event's place among its producer's answers to the trigger (a handler that fans out answers
# several: the re-derived one is the handler's answer at that place). Re-derivers default it to 0.
Rederive = Callable[[list[Recorded], Recorded, Message, int], Message]


def from_observed(derive: Callable[[list[Recorded], Recorded, Message], Message]) -> Rederive:
    """The re-deriver of an event made by `derive(prior, trigger, observed)`: replay feeds it what was recorded."""

    def rederive(prior: list[Recorded], trigger: Recorded, recorded: Message, ordinal: int = 0) -> Message:
        return derive(prior, trigger, recorded.observed)

    return rederive


# Events that are inputs to the system, not answers: nothing to re-derive.
INPUT_EVENTS = ("RunRequested", "RollbackRequested", "RunCancelled")
# ...except where a service decided it from the run's own log: the profiler's rollback of a run's swaps for a
# served regression (schema 11) answers its RunCompleted and is re-derived. An operator's, or the server's own for a
# kernel that failed live, stays an input.
DECIDED_INPUTS = {("RollbackRequested", "profiler")}


def is_input(rec: Recorded) -> bool:
    return rec.type in INPUT_EVENTS and (rec.type, rec.env.producer) not in DECIDED_INPUTS


@dataclass(frozen=True)
class Mismatch:
    seq: int
    type: str
    event_id: str
    problem: str

    def __str__(self) -> str:
        return f"seq {self.seq} {self.type} {self.event_id[:8]}: {self.problem}"


def _diff(expected: Message, recorded: Message) -> str:
    exp, rec = expected.ListFields(), recorded.ListFields()
    names = sorted({f.name for f, _ in exp} | {f.name for f, _ in rec})
    e, r = ({f.name: v for f, v in exp}, {f.name: v for f, v in rec})
    diffs = [n for n in names if e.get(n) != r.get(n)]
    parts = [f"{n}: recorded {str(r.get(n))[:80]!r} re-derived {str(e.get(n))[:80]!r}" for n in diffs[:3]]
    return "; ".join(parts) or "bytes differ"


def _ordinals(run_log: list[Recorded]) -> dict[int, int]:
    """The ordinal each answer must have been derived with: its place among the answers its producer gave
    to the same cause, in stream order (the runner publishes a handler's answers as ordinals 0, 1, ...).

    A RunFailed stands alone: the runner writes it (ordinal 0) when a service gave up on a trigger.
    """
    seen: dict[tuple[str, str, str], int] = {}
    out = {}
    for rec in run_log:
        env = rec.env
        if is_input(rec):
            continue
        group = (env.causation_id, env.producer, "RunFailed" if rec.type == "RunFailed" else "")
        out[rec.seq] = seen.get(group, 0)
        seen[group] = out[rec.seq] + 1
    return out


def verify(run_log: list[Recorded], rederivers: dict[str, Rederive]) -> list[Mismatch]:
    """Every mismatch between the recorded log and what the code re-derives from it.

    Each event must be the one derivation of its trigger and ordinal: a second copy of an event (the same
    id stored twice, e.g. published without its message id so the stream could not drop it) is flagged,
    and so is an answer whose id was derived with another ordinal than its place among its siblings.
    """
    out: list[Mismatch] = []
    by_id: dict[str, Recorded] = {}
    ordinals = _ordinals(run_log)
    for index, rec in enumerate(run_log):
        env = rec.env

        def bad(problem: str, rec: Recorded = rec) -> None:
            out.append(Mismatch(rec.seq, rec.type, rec.env.event_id, problem))

        copy_of = by_id.get(env.event_id)
        if copy_of is not None:
            bad(f"a second copy of seq {copy_of.seq}: an event is stored once (was it published without its id?)")
            continue
        by_id[env.event_id] = rec
        if is_input(rec):
            continue
        if env.producer not in owners.owners(rec.type):  # a fact has one owner (services.core.owners)
            bad(f"written by {env.producer or '(nobody)'}: only {', '.join(owners.owners(rec.type))} write it")
        cause = by_id.get(env.causation_id)
        if cause is None or cause is rec:
            bad(f"its cause {env.causation_id[:8] or '(none)'} is not earlier in the log")
            continue
        ordinal = ordinals[rec.seq]
        if env.event_id != ev.derived_event_id(env.run_id, env.causation_id, env.type, ordinal):
            # either not derived from its cause at all, or derived at another place than its own (a forged
            # or re-ordered answer): an answer is its cause's derivation at its place, nothing else
            bad(f"event id is not derived from its cause at its place (ordinal {ordinal} of its cause's answers)")
        fn = rederivers.get(rec.type)
        if fn is None:
            bad("no re-deriver is registered for this type")
            continue
        prior = [r for r in run_log[:index] if r.seq <= cause.seq]
        recorded = rec.msg
        try:
            expected = fn(prior, cause, recorded, ordinal)
        except Exception as exc:  # a re-deriver that cannot run is a replay failure, not a crash
            bad(f"re-deriving raised {exc!r}")
            continue
        if expected.DESCRIPTOR.name != rec.type:
            bad(f"re-derived a {expected.DESCRIPTOR.name} where the log has a {rec.type}")
        elif expected.SerializeToString(deterministic=True) != env.payload:
            bad(_diff(expected, recorded))
    return out
