"""How often `yantra up` may restart a process that keeps exiting: a budget per sliding time window,
with exponential backoff between restarts of the same process.

Pure: every method takes the time (`now`, seconds on any monotonic clock) from its caller, so the
policy is tested with made-up times and the supervisor passes `time.monotonic()`.

- At most `limit` restarts of one process within any `window_s` seconds: the exit that would need
  one more is the end of the budget (the supervisor stops the stack with a clear message). Restarts
  older than the window no longer count, so a stack that runs for weeks survives one crash a day.
- Between restarts of the same process, a backoff: none for the first exit after the process had
  been up for `stable_s`, then `backoff_s`, doubled for each further exit that follows quickly,
  capped at `backoff_max_s`. A restart waiting for its backoff is deferred, never dropped.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass, field

DEFAULT_LIMIT = 5
DEFAULT_WINDOW_S = 600.0
DEFAULT_BACKOFF_S = 0.5
DEFAULT_BACKOFF_MAX_S = 30.0
DEFAULT_STABLE_S = 60.0

ENV_LIMIT = "YANTRA_RESTART_LIMIT"
ENV_WINDOW = "YANTRA_RESTART_WINDOW_S"
ENV_BACKOFF_MAX = "YANTRA_RESTART_BACKOFF_MAX_S"


@dataclass(frozen=True)
class Decision:
    """What to do about a process found dead: `restart` now, `wait` until `due`, or `give_up`."""

    action: str  # "restart" | "wait" | "give_up"
    due: float = 0.0  # when the restart may happen (restart/wait)
    restarts_in_window: int = 0  # restarts of this process within the window before this exit
    first: bool = False  # the first call for this exit (the supervisor says so once)


@dataclass
class RestartBudget:
    limit: int = DEFAULT_LIMIT
    window_s: float = DEFAULT_WINDOW_S
    backoff_s: float = DEFAULT_BACKOFF_S
    backoff_max_s: float = DEFAULT_BACKOFF_MAX_S
    stable_s: float = DEFAULT_STABLE_S
    _restarts: dict[str, deque[float]] = field(default_factory=dict, repr=False)
    _started: dict[str, float] = field(default_factory=dict, repr=False)
    _quick_exits: dict[str, int] = field(default_factory=dict, repr=False)  # exits in a row, each soon after a start
    _due: dict[str, float] = field(default_factory=dict, repr=False)  # a pending restart and when it may happen

    def __post_init__(self) -> None:
        if self.limit < 0:
            raise ValueError(f"the restart limit must be 0 or more, got {self.limit}")
        if self.window_s <= 0:
            raise ValueError(f"the restart window must be positive, got {self.window_s} s")
        if self.backoff_s < 0 or self.backoff_max_s < 0:
            raise ValueError("the restart backoff must not be negative")

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> RestartBudget:
        """Limit, window and backoff cap from YANTRA_RESTART_LIMIT, _WINDOW_S, _BACKOFF_MAX_S (defaults above);
        ValueError names the variable that does not parse."""
        env = os.environ if env is None else env
        values: dict[str, float] = {}
        for key, name, kind in (
            (ENV_LIMIT, "limit", int),
            (ENV_WINDOW, "window_s", float),
            (ENV_BACKOFF_MAX, "backoff_max_s", float),
        ):
            text = env.get(key, "").strip()
            if not text:
                continue
            try:
                values[name] = kind(text)
            except ValueError:
                raise ValueError(f"{key}={text!r} is not a{'n integer' if kind is int else ' number'}") from None
        try:
            return cls(**values)
        except ValueError as exc:
            raise ValueError(f"{exc} ({ENV_LIMIT}, {ENV_WINDOW}, {ENV_BACKOFF_MAX})") from None

    def describe(self) -> str:
        return f"at most {self.limit} restarts of one process per {self.window_s:g} s"

    # ------------------------------------------------------------------ the supervisor's calls

    def started(self, name: str, now: float) -> None:
        """`name` was started (first start or a restart attempt): its uptime counts from `now`."""
        self._started[name] = now

    def restarts_in_window(self, name: str, now: float) -> int:
        times = self._restarts.get(name)
        if not times:
            return 0
        while times and times[0] <= now - self.window_s:
            times.popleft()
        return len(times)

    def on_dead(self, name: str, now: float) -> Decision:
        """`name` is found dead at `now` (asked again on every poll while it stays dead).

        The first call for an exit records it and decides: give up when the window already holds
        `limit` restarts, else a restart due after the backoff. Later calls for the same exit say
        `wait` until that time and then `restart`; the caller then calls `restarted`.
        """
        due = self._due.get(name)
        first = due is None
        if first:
            in_window = self.restarts_in_window(name, now)
            if in_window >= self.limit:
                return Decision("give_up", 0.0, in_window, first=True)
            started = self._started.get(name)
            if started is None or now - started >= self.stable_s:
                self._quick_exits[name] = 0  # it ran long enough: a fresh start, no backoff
            quick = self._quick_exits.get(name, 0)
            delay = 0.0 if quick == 0 else min(self.backoff_max_s, self.backoff_s * 2 ** (quick - 1))
            self._quick_exits[name] = quick + 1
            due = self._due[name] = now + delay
        in_window = self.restarts_in_window(name, now)
        return Decision("restart" if now >= due else "wait", due, in_window, first=first)

    def restarted(self, name: str, now: float) -> None:
        """The pending restart of `name` was attempted at `now` (it counts even if the start then failed)."""
        self._due.pop(name, None)
        self._restarts.setdefault(name, deque()).append(now)
        self.started(name, now)

    def backoff_of(self, name: str) -> float:
        """The delay the next quick exit of `name` would wait (for messages and tests)."""
        quick = self._quick_exits.get(name, 0)
        return 0.0 if quick == 0 else min(self.backoff_max_s, self.backoff_s * 2 ** (quick - 1))
