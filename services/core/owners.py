"""Who writes which event: one owner for each fact, as docs and ARCHITECTURE.md's table of services say, and on a
secure stack (`yantra up --secure`) what the NATS server lets each one's user publish.

Readers already refuse an event whose envelope is not what its subject says (another type, another run:
services.core.bus), so a user that may publish only `yantra.run.*.CandidateJudged` can write verdicts and nothing
else. Without these permissions any service's credential could write any fact: a coder (which talks to an LLM)
could publish a CandidateJudged at reward +3, and the server would swap on it. With them, a leaked credential
writes only what its service owns, and the envelope's `producer` is what the server checked.

Every service may also end a run it cannot answer (RunFailed, services.core.run_end), put a message it cannot handle
on the dead-letter stream, and use the JetStream API (streams, consumers, acks) except to delete or purge the log.
"""

from __future__ import annotations

from services.core import events as ev

# What each publisher writes to a run's log. "cli": the `yantra` commands (and the TUI, which writes nothing).
EMITS: dict[str, tuple[str, ...]] = {
    "cli": ("RunRequested", "RunCancelled", "RollbackRequested"),  # an operator's rollback too
    "profiler": ("ProfileCaptured", "RunCompleted", "RollbackRequested"),  # the served verdict's rollback
    "skillstore": ("SkillsRetrieved", "SkillPublished", "SkillCredited"),
    "coder": ("CandidateProposed", "TargetConcluded"),
    "judge": ("CandidateJudged",),
    "server": ("SwapCommitted", "SwapRejected", "SwapRolledBack", "SwapReapplied", "RollbackRequested"),
}
ANY_PUBLISHER = ("RunFailed",)  # a step that cannot be answered ends its run, whoever was to answer it
METRICS = {"server": ("ServerMetrics",)}
# The JetStream API but what would take the log away: nothing in the project deletes or purges a stream.
JS_API = ("$JS.API.>", "$JS.ACK.>", "$JS.FC.>", "_INBOX.>")
JS_API_DENIED = ("$JS.API.STREAM.DELETE.>", "$JS.API.STREAM.PURGE.>", "$JS.API.STREAM.MSG.DELETE.>")


def owners(type_name: str) -> tuple[str, ...]:
    """The publishers that may write `type_name` to a run's log."""
    if type_name in ANY_PUBLISHER:
        return tuple(EMITS)
    return tuple(p for p, types in EMITS.items() if type_name in types)


def publish_allowed(publisher: str) -> tuple[str, ...] | None:
    """The subjects `publisher`'s user may publish to; None for a user that is no publisher of the project's (an
    operator's system-account user): no restriction is written for it."""
    if publisher not in EMITS:
        return None
    runs = [ev.run_filter("*", t) for t in (*EMITS[publisher], *ANY_PUBLISHER)]
    metrics = [ev.metrics_subject(publisher)] if publisher in METRICS else []
    return (*runs, *metrics, ev.DLQ_SUBJECTS, *JS_API)
