"""One run's state, folded from its log: what the domains decide on, instead of each re-querying raw lists.

The aggregate shape of the `eventsourcing` library: a frozen `RunState`, `evolve(state, event)` applied to
each event in log order (`fold`), and decisions as pure functions of a state. Where the log holds a fact
twice (a forged or re-published event), the first one counts, everywhere.

The rule for when a run is complete lives here (`outcome`), beside the facts it reads: the profiler, which
measures and writes the RunCompleted, asks it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType

from services.core.events import Recorded
from services.core.pb import events_pb2 as pb

# The events that can end a run, and the outcome each one means (when `outcome` says it does).
OUTCOMES = {
    "SwapCommitted": "swapped",
    "SwapRejected": "rejected",
    "TargetConcluded": "no_swap",
    "ProfileCaptured": "no_target",
}
_EMPTY = MappingProxyType({})


@dataclass(frozen=True)
class TargetView:
    """One target's search: its proposals in log order, the first verdict on each in log order, its end."""

    proposals: tuple[pb.CandidateProposed, ...]
    judged: tuple[pb.CandidateJudged, ...]
    concluded: pb.TargetConcluded | None

    @property
    def pending(self) -> int:
        """Proposals not judged yet."""
        return len(self.proposals) - len(self.judged)


@dataclass(frozen=True)
class RunState:
    request: pb.RunRequested | None = None
    profile: pb.ProfileCaptured | None = None  # the last one
    # by candidate id, in log order: the first proposal, and the first verdict on it
    proposals: MappingProxyType = field(default_factory=lambda: _EMPTY)
    judged: MappingProxyType = field(default_factory=lambda: _EMPTY)
    concluded: MappingProxyType = field(default_factory=lambda: _EMPTY)  # target class -> its first TargetConcluded
    completed: pb.RunCompleted | None = None

    def proposal(self, candidate_id: str) -> pb.CandidateProposed | None:
        return self.proposals.get(candidate_id)

    def target(self, target_class: str) -> TargetView:
        proposals = tuple(p for p in self.proposals.values() if p.target_class == target_class)
        ids = {p.candidate_id for p in proposals}
        judged = tuple(j for j in self.judged.values() if j.candidate_id in ids)
        return TargetView(proposals, judged, self.concluded.get(target_class))


def _added(mapping: MappingProxyType, key: str, value) -> MappingProxyType:
    if key in mapping:  # the first fact counts
        return mapping
    return MappingProxyType({**mapping, key: value})


def evolve(state: RunState, rec: Recorded) -> RunState:
    """The state after `rec` (events that decide nothing here leave it as it was)."""
    msg, kind = rec.msg, rec.type
    if kind == "RunRequested" and state.request is None:
        return replace(state, request=msg)
    if kind == "ProfileCaptured":
        return replace(state, profile=msg)
    if kind == "CandidateProposed":
        return replace(state, proposals=_added(state.proposals, msg.candidate_id, msg))
    if kind == "CandidateJudged":
        return replace(state, judged=_added(state.judged, msg.candidate_id, msg))
    if kind == "TargetConcluded":
        return replace(state, concluded=_added(state.concluded, msg.target_class, msg))
    if kind == "RunCompleted" and state.completed is None:
        return replace(state, completed=msg)
    return state


def fold(log: list[Recorded]) -> RunState:
    state = RunState()
    for rec in log:
        state = evolve(state, rec)
    return state


# The events that end one target's work: its conclusion without a swap, or the server's answer to one with.
TARGET_ENDS = ("TargetConcluded", "SwapCommitted", "SwapRejected")


def targets(state: RunState) -> tuple[str, ...]:
    """The run's targets in order: the profile's list (schema 5), or its one chosen target before it."""
    if state.profile is None:
        return ()
    return tuple(state.profile.targets) or ((state.profile.target_class,) if state.profile.target_class else ())


def next_target(state: RunState, trigger: Recorded) -> str:
    """The target whose work starts now that `trigger` ended the one before ("" when it ended none, or none is
    left). `state` includes the trigger. Targets run one after another, so one not concluded yet is next."""
    if trigger.type not in TARGET_ENDS or (trigger.type == "TargetConcluded" and trigger.msg.swap):
        return ""
    return next((t for t in targets(state) if t not in state.concluded), "")


def outcome(state: RunState, trigger: Recorded) -> str:
    """The outcome `trigger` ends the run with ("" when it does not), in the state that includes it.

    A profile with no target ends it (nothing to optimise); a conclusion without a swap ends it; a
    conclusion that swaps is answered by the server, whose SwapCommitted or SwapRejected ends it — each of
    these only when it ends the run's last target (`next_target`: otherwise the next one starts). A run
    ends once: after its RunCompleted nothing does. A rollback never ends a run (it answers an operator's
    or the shadow check's request, after the commit that ended it).
    """
    if state.completed is not None or trigger.type not in OUTCOMES:
        return ""
    msg = trigger.msg
    if trigger.type == "TargetConcluded" and msg.swap:
        return ""
    if trigger.type == "ProfileCaptured" and msg.target_class:
        return ""
    if next_target(state, trigger):  # another target's work starts: the run goes on
        return ""
    return OUTCOMES[trigger.type]
