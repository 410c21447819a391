"""The judge's per-call limit, kept on the live path: a committed kernel's call past it is taken out of service.

The judge stops a candidate whose call runs past `services.core.call_limits.call_limit_s` (proportional to the
bytes the call moves). The server holds the kernel to the same limit once it serves, on the calls it times:

- **Which calls.** On a CPU every committed call (the interpreter runs the kernel inside the call, so the call's
  time is the kernel's). On a GPU a launch returns before the kernel ends, so only the calls the shadow check
  watches are timed (`hotswap.serve`): the first `YANTRA_SHADOW_CALLS` eager calls after a commit and the first
  call of every new size, each synchronised before its clock stops (the inline check reads the output right
  after, so the wait is paid anyway). That covers the whole domain of what a kernel's time can depend on: the
  judge's dataflow check (services.core.kernel_dataflow) bounds every loop by shape arguments and never by a
  loaded value, so a call's time is a function of its shape, and every shape's first call is timed.
- **A call that returns late** keeps its answer (checked inline against the module's own forward where the call
  was watched: it was slow, not shown wrong), and the swap is reverted and reported (`SwapHandle.drifted`, as the
  shadow check does): the log gets a RollbackRequested naming the call, its shape and the limit.
- **A call that does not return** (a kernel looping for minutes) cannot be stopped: a thread cannot be cancelled
  and a running GPU kernel cannot be interrupted. At its deadline the watchdog thread reverts the swap (no new
  call reaches the kernel) and reports it, so the RollbackRequested is on the log while the engine thread is
  still stuck. `service.request_rollbacks` then gives the call `HUNG_GRACE_S` more to come back; if it has not,
  the server exits (status `EXIT_HUNG`) for its supervisor to start it again, and the restart does not re-apply
  a swap whose rollback was requested (services.server.restore). The requests in flight on the stuck engine are
  lost either way; the ones after the restart are served by the module's own forward.

The limits are generous by orders of magnitude for an honest kernel (see call_limits): every call here may have
to compile (Triton specialises a kernel on its integer arguments, so a new size can compile anew), so a GPU call
gets the compile floor.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from services.core.call_limits import call_limit_s, describe
from services.core.shapes import shape_text

HUNG_GRACE_S = 10.0  # after a watchdog report, how long a stuck call gets to come back before the server exits
EXIT_HUNG = 3  # the server's status when a kernel call never came back (the supervisor restarts it)
PREFIX = "a live call of "  # how a limit's report begins (services.server.service.rollback_request reads it)


@dataclass
class Timed:
    """One timed live call: `late` is the one line saying it ran past its limit ("" while it did not)."""

    call: str
    shape: str
    bytes_moved: int
    limit_s: float
    deadline: float
    fired: bool = False  # the watchdog reported it still running at its deadline
    late: str = ""


class LiveClock:
    """Times committed kernels' live calls against their limits, one call at a time (the engine thread's).

    `call(...)` arms the watchdog for one call; at its deadline the watchdog thread calls `on_hung(detail)` of that
    call (the swap handle's `drifted`: revert and report). `stuck()` says whether a call is past its deadline and
    still running. `limit` and `now` are the limit rule and the clock (tests pass small limits)."""

    def __init__(
        self,
        limit: Callable[[float, str], float] = lambda moved, device: call_limit_s(moved, device),
        now: Callable[[], float] = time.monotonic,
    ):
        self._limit, self._now = limit, now
        self._cond = threading.Condition()
        self._armed: tuple[Timed, Callable[[str], None]] | None = None
        self._thread: threading.Thread | None = None
        self.timed = 0  # calls timed so far
        self.over = 0  # calls past their limit (returned late or reported still running)

    def _watch(self) -> None:
        while True:
            with self._cond:
                armed = self._armed
                left = armed[0].deadline - self._now() if armed and not armed[0].fired else None
                if left is None or left > 0:
                    self._cond.wait(left)
                    continue
                timed, on_hung = armed
                timed.fired = True
                self.over += 1
            on_hung(describe(timed.call, timed.shape, timed.bytes_moved, timed.limit_s))  # outside the lock

    @contextmanager
    def call(self, what: str, shape, bytes_moved: int, device: str, on_hung: Callable[[str], None]) -> Iterator[Timed]:
        limit = self._limit(bytes_moved, device)
        start = self._now()
        timed = Timed(what, shape_text(tuple(shape)), int(bytes_moved), limit, start + limit)
        with self._cond:
            self._armed = (timed, on_hung)
            self.timed += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="live-call-clock", daemon=True)
                self._thread.start()
            self._cond.notify_all()
        try:
            yield timed
        finally:
            seconds = self._now() - start
            with self._cond:
                self._armed = None
                self._cond.notify_all()
                if seconds > limit:
                    if not timed.fired:
                        self.over += 1
                    timed.late = describe(what, timed.shape, timed.bytes_moved, limit, seconds)

    def stuck(self) -> bool:
        """A call is past its deadline and has not come back."""
        with self._cond:
            return self._armed is not None and self._armed[0].fired
