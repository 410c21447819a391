"""Swaps re-applied from the log after a restart: the log, not process memory, says what is served.

A restarted server loads fresh weights with the stock forwards. Every swap the log holds as
committed (and not rolled back) for the model this server serves is re-applied through the same
checks as the first time: the log must still vouch for the candidate, the static check runs again,
and parity is re-checked on this process's live weights by the same pure rule (`swap_outcome`).
A swap that no longer passes is left out and said so in the log of this process.
"""

from __future__ import annotations

import logging

from services.core import events as ev
from services.core.bus import Bus
from services.core.swaplog import live_swaps, read_swap_events
from services.server.service import ServerService

log = logging.getLogger(__name__)


async def restore_swaps(bus: Bus, service: ServerService, model_name: str) -> list[str]:
    """Re-apply the log's live swaps for `model_name`; returns the swap ids now served again."""
    restored = []
    for rec in reversed(live_swaps(*await read_swap_events(bus))):  # the newest swap of a target wins
        run_log = await bus.read_run(rec.env.run_id)
        request = ev.first(run_log, "RunRequested")
        if request is None or request.msg.model != model_name:
            continue  # a swap made on another model
        newer = service.engine.swaps.active_for(rec.msg.target_class)
        if newer is not None:
            log.info("swap %s superseded by the newer %s", rec.msg.swap_id, newer.swap_id)
            continue
        problem = await service.reapply(rec, run_log)
        if problem:
            log.warning("swap %s not re-applied: %s", rec.msg.swap_id, problem)
        else:
            log.info("swap %s re-applied from the log (%s)", rec.msg.swap_id, rec.msg.target_class)
            restored.append(rec.msg.swap_id)
    return restored
