"""What the log says about swaps: which are live, which one a swap id names, how each ended.

Pure functions of the events, and `read_swap_events`, the one read they all start from.

The server's restart (services.server.restore) and the CLI's `swaps` and `rollback` read the same
answer from the same events, so what `yantra swaps` calls live is what a restarted server re-applies.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.core import events as ev
from services.core.events import Recorded


@dataclass(frozen=True)
class SwapView:
    committed: Recorded  # the SwapCommitted (its newest, when a restart committed it again)
    rolled_back: Recorded | None  # the first SwapRolledBack naming it, None while it is live
    reapplied: Recorded | None = None  # the newest restart's SwapReapplied, None if no restart re-applied it

    @property
    def dropped(self) -> str:
        """Why the last restart did not re-apply this live swap ("" when it did, or none tried)."""
        r = self.reapplied
        return r.msg.reason if r is not None and self.rolled_back is None and not r.msg.restored else ""

    @property
    def swap_id(self) -> str:
        return self.committed.msg.swap_id

    @property
    def run_id(self) -> str:
        return self.committed.env.run_id


def _key(rec: Recorded) -> tuple[str, str]:
    # A swap is one commit in one run. Swap ids are unique per commit since schema 2; the run keeps the
    # older `swap-<candidate>` ids apart too, which repeated when two runs committed the same kernel.
    return rec.env.run_id, rec.msg.swap_id


def swap_history(
    committed: list[Recorded], rolled_back: list[Recorded], reapplied: list[Recorded] = ()
) -> list[SwapView]:
    """Every swap the log committed, oldest first, with the rollback that ended it (if one did).

    A rollback is recorded in the swap's own run, so it ends only the swap of that id in that run. Any
    SwapRolledBack naming the swap ends it, even one that found nothing to restore (a server that no
    longer held it): the request to take it out is on the record, and a restart honours it.
    """
    ended: dict[tuple[str, str], Recorded] = {}
    for r in rolled_back:
        ended.setdefault(_key(r), r)
    restarts = {_key(r): r for r in sorted(reapplied, key=lambda r: r.seq)}
    newest = {_key(r): r for r in sorted(committed, key=lambda r: r.seq)}
    views = [SwapView(rec, ended.get(key), restarts.get(key)) for key, rec in newest.items()]
    return sorted(views, key=lambda v: v.committed.seq)


def live_swaps(
    committed: list[Recorded], rolled_back: list[Recorded], reapplied: list[Recorded] = ()
) -> list[Recorded]:
    """Committed swaps, oldest first, one per commit, without those a rollback in their run ended.

    A swap the last restart could not re-apply is still live in the log (nobody asked to take it out), so
    the next restart tries again; `SwapView.dropped` says why it is not served meanwhile."""
    return [v.committed for v in swap_history(committed, rolled_back, reapplied) if v.rolled_back is None]


def find_swap(views: list[SwapView], swap_id: str) -> SwapView | None:
    """The swap an id names: the live one when an old log holds the id in several runs, else the newest."""
    named = [v for v in views if v.swap_id == swap_id]
    live = [v for v in named if v.rolled_back is None]
    return (live or named or [None])[-1]


async def read_swap_events(bus) -> tuple[list[Recorded], list[Recorded], list[Recorded]]:
    """The I/O edge: every SwapCommitted, SwapRolledBack and SwapReapplied of every run, in stream order."""
    committed = await bus.read_all(ev.run_filter("*", "SwapCommitted"))
    rolled_back = await bus.read_all(ev.run_filter("*", "SwapRolledBack"))
    reapplied = await bus.read_all(ev.run_filter("*", "SwapReapplied"))
    return committed, rolled_back, reapplied
