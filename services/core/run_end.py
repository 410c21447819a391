"""How a run ends, as pure functions of its log: completed, failed or cancelled, or still running.

A run that cannot finish must say so in its log, or it sits in "running" forever. Two facts end one
early: `RunFailed`, written by the service that could not answer one of the run's events (it refused an
invalid request, or it failed every delivery), and `RunCancelled`, an input event (`yantra cancel RUN`).
After either, services answer nothing more of the run (`services.core.runner`) except a rollback of a
swap it made: a kernel it put live must stay removable.
"""

from __future__ import annotations

from services.core import events as ev
from services.core.events import Recorded
from services.core.pb import events_pb2 as pb
from services.core.replay import Rederive, from_observed

# Answered even in a stopped run: taking a live kernel out must always be possible.
ANSWERED_AFTER_STOP = ("RollbackRequested",)


def ended(log: list[Recorded]) -> Recorded | None:
    """The event that ended the run (the first terminal one), or None while it runs."""
    return next((r for r in log if r.type in ev.TERMINAL_EVENTS), None)


def stopped(log: list[Recorded]) -> Recorded | None:
    """The RunFailed or RunCancelled that stopped the run early, if one did."""
    return next((r for r in log if r.type in ev.STOPPING_EVENTS), None)


def answers(log: list[Recorded], trigger: Recorded) -> bool:
    """Whether a service should still answer `trigger` in a run whose log is `log`."""
    return trigger.type in ANSWERED_AFTER_STOP or stopped(log) is None


def run_failed(prior: list[Recorded], trigger: Recorded, observed: pb.RunFailureObservation) -> pb.RunFailed:
    """The RunFailed that ends a run whose `trigger` `observed.service` could not answer."""
    if observed.attempts:
        how = f"gave up after {observed.attempts} attempts"
    else:
        how = "refused it"
    reason = f"{observed.service} could not answer {trigger.type} ({how}): {observed.error}"
    return pb.RunFailed(observed=observed, reason=reason, failed_trigger=trigger.type)


def state(log: list[Recorded]) -> str:
    """One phrase for `yantra runs` and the TUI: the outcome, why it stopped, or what it waits on."""
    end = ended(log)
    if end is None:
        return f"running ({log[-1].type})" if log else "unknown"
    msg = end.msg
    if end.type == "RunCompleted":
        return msg.outcome
    if end.type == "RunFailed":
        return f"failed: {msg.reason}"
    return f"cancelled: {msg.reason or 'no reason given'}"


REDERIVE: dict[str, Rederive] = {"RunFailed": from_observed(run_failed)}
