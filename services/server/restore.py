"""Swaps re-applied from the log after a restart: the log, not process memory, says what is served.

A restarted server loads fresh weights with the stock forwards. Every swap the log holds as
committed (and not rolled back) for the model this server serves is re-applied through the same
checks as the first time: the log must still vouch for the candidate, the static check runs again,
and parity is re-checked on this process's live weights by the same pure rule (`swap_outcome`).
Each outcome is a SwapReapplied in the swap's own run (re-applied with its parity, or not and why:
superseded by a newer swap of the target, the log no longer vouching, parity failing on these weights, a
rollback requested that the last process never answered: a kernel call that did not come back, see call_watch),
so the log, `yantra swaps` and the TUI say what this server serves.
"""

from __future__ import annotations

import logging
import time

from services.core import events as ev
from services.core.bus import Bus
from services.core.pb import events_pb2 as pb
from services.core.replay import INPUT_EVENTS
from services.core.swaplog import live_swaps, read_swap_events
from services.server.domain import reapply_outcome
from services.server.service import ServerService

log = logging.getLogger(__name__)


async def restore_swaps(bus: Bus, service: ServerService, model_name: str, clock=time.time_ns) -> list[str]:
    """Re-apply the log's live swaps for `model_name`, recording each outcome as a SwapReapplied in the swap's
    run; returns the swap ids now served again."""
    restored = []
    for rec in reversed(live_swaps(*await read_swap_events(bus))):  # the newest swap of a target wins
        run_log = await bus.read_run(rec.env.run_id)
        request = ev.first(run_log, "RunRequested")
        if request is None or request.msg.model != model_name:
            continue  # a swap made on another model
        newer = service.swaps.active_for(rec.msg.target_class)
        asked = rollback_asked(run_log, rec.msg.swap_id)
        if asked:  # asked before the last process could answer (a kernel call that never came back, say)
            observed = pb.ParityObservation(dtype=service.engine.dtype, error=f"a rollback was requested: {asked}")
        elif newer is not None:
            why = f"superseded by the newer {newer.swap_id} on {rec.msg.target_class}"
            observed = pb.ParityObservation(dtype=service.engine.dtype, error=why)
        else:
            observed = await service.reapply(rec, run_log)
        outcome = reapply_outcome([r for r in run_log if r.seq <= rec.seq], rec, observed)
        await bus.publish(_answer(rec, outcome, run_log, clock()))
        if outcome.restored:
            log.info("swap %s re-applied from the log (%s)", rec.msg.swap_id, rec.msg.target_class)
            restored.append(rec.msg.swap_id)
        else:
            log.warning("swap %s %s", rec.msg.swap_id, outcome.reason)
    return restored


def rollback_asked(run_log: list[ev.Recorded], swap_id: str) -> str:
    """The reason of a RollbackRequested for `swap_id` in its run ("" when none): a restart must not serve a swap
    the log asked to take out, answered or not (its answer comes when the request is redelivered)."""
    asked = next((r for r in run_log if r.type == "RollbackRequested" and r.msg.swap_id == swap_id), None)
    return (asked.msg.reason or "no reason given") if asked is not None else ""


def _answer(committed: ev.Recorded, outcome: pb.SwapReapplied, run_log: list[ev.Recorded], time_ns: int) -> ev.Envelope:
    """The envelope of this restart's answer to the commit: the next ordinal after the server's earlier answers
    to it (each restart adds one; a retried publish of the same one is dropped by the stream)."""
    cause = committed.env.event_id
    earlier = sum(
        r.env.causation_id == cause and r.env.producer == "server" and r.type not in INPUT_EVENTS for r in run_log
    )
    return ev.make_envelope(
        committed.env.run_id, outcome, producer="server", time_ns=time_ns, causation_id=cause, ordinal=earlier
    )
