"""The swaps this server process holds: what is live, what was rolled back (read by ListSwaps, Health)."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from services.core.pb import events_pb2 as pb
from services.core.pb import inference_pb2 as ipb
from services.server.hotswap import SwapHandle


@dataclass
class SwapEntry:
    committed: pb.SwapCommitted
    handle: SwapHandle
    state: str = "committed"  # "committed" | "rolled_back"

    @property
    def serving(self) -> bool:
        """Committed and not fallen back after a live failure (that one awaits its rollback event)."""
        return self.state == "committed" and not self.handle.failure

    @property
    def shown_state(self) -> str:
        return "failed_live" if self.state == "committed" and self.handle.failure else self.state

    @property
    def swap_id(self) -> str:
        return self.committed.swap_id

    @property
    def target(self) -> str:
        return self.handle.target


class SwapRegistry:
    def __init__(self):
        self._entries: dict[str, SwapEntry] = {}
        self._lock = threading.Lock()

    def add(self, committed: pb.SwapCommitted, handle: SwapHandle) -> None:
        with self._lock:
            self._entries[committed.swap_id] = SwapEntry(committed, handle)

    def get(self, swap_id: str) -> SwapEntry | None:
        with self._lock:
            return self._entries.get(swap_id)

    def active_for(self, target: str) -> SwapEntry | None:
        with self._lock:
            return next((e for e in self._entries.values() if e.serving and e.target == target), None)

    def mark_rolled_back(self, swap_id: str) -> None:
        with self._lock:
            self._entries[swap_id].state = "rolled_back"

    def serving_entries(self) -> list[SwapEntry]:
        with self._lock:
            return [e for e in self._entries.values() if e.serving]

    def active_count(self) -> int:
        with self._lock:
            return sum(e.serving for e in self._entries.values())

    def records(self) -> list[ipb.SwapRecord]:
        with self._lock:
            return [
                ipb.SwapRecord(
                    swap_id=e.swap_id,
                    candidate_id=e.committed.candidate_id,
                    target_class=e.committed.target_class,
                    modules_patched=e.committed.modules_patched,
                    state=e.shown_state,
                    source_sha256=e.committed.source_sha256,
                    calls=e.handle.calls,  # watched live calls (hotswap.SwapHandle.watch), kept after a rollback
                    own_calls=e.handle.own_calls,  # live calls its plan left to the module's own forward
                )
                for e in self._entries.values()
            ]
