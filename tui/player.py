"""The replay player: where a replay is, how fast it goes, and how long to wait for the next event (pure).

Replay releases a recorded log into the very fold the live screen uses, one event at a time, so
the screen after N released events is the screen the live TUI showed after the same N events.
The player only decides *when* to release: the recorded gap between events over the speed,
with idle gaps shortened so a run that waited a minute for a GPU does not freeze the replay.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from services.core.events import Recorded

INSTANT = math.inf
SPEEDS = (0.5, 1.0, 2.0, 5.0, 10.0, INSTANT)
MAX_GAP_S = 2.0  # a recorded gap longer than this plays as this long (at 1x)


@dataclass(frozen=True)
class Player:
    total: int
    position: int = 0  # events released so far
    speed_index: int = 1
    paused: bool = False

    @property
    def speed(self) -> float:
        return SPEEDS[self.speed_index]

    @property
    def finished(self) -> bool:
        return self.position >= self.total

    @property
    def speed_label(self) -> str:
        s = self.speed
        return "instant" if s == INSTANT else f"{s:g}x"

    def faster(self) -> Player:
        return replace(self, speed_index=min(self.speed_index + 1, len(SPEEDS) - 1))

    def slower(self) -> Player:
        return replace(self, speed_index=max(self.speed_index - 1, 0))

    def toggled(self) -> Player:
        return replace(self, paused=not self.paused)

    def advanced(self, n: int) -> Player:
        return replace(self, position=min(self.position + max(n, 0), self.total))

    def restarted(self) -> Player:
        return replace(self, position=0)

    def delay_before_next(self, log: Sequence[Recorded]) -> float:
        """Seconds to wait before releasing the next event at this speed (0 for the first and for instant)."""
        if self.finished or self.position == 0 or self.speed == INSTANT:
            return 0.0
        gap_ns = log[self.position].env.time_unix_ns - log[self.position - 1].env.time_unix_ns
        return min(max(gap_ns / 1e9, 0.0), MAX_GAP_S) / self.speed


def player_for(total: int, speed: float = 1.0, paused: bool = False) -> Player:
    """A player at the listed speed nearest to `speed` (INSTANT for instant)."""
    if not speed > 0:
        raise ValueError(f"replay speed must be > 0, got {speed}")
    finite = [i for i, s in enumerate(SPEEDS) if s != INSTANT]
    index = len(SPEEDS) - 1 if speed == INSTANT else min(finite, key=lambda i: abs(math.log(SPEEDS[i] / speed)))
    return Player(total, speed_index=index, paused=paused)
