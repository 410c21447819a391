"""Riding out a JetStream leader election: which errors are worth another try, and how long to wait before it.

On a cluster, a stream (or the JetStream meta group) has no leader for the 4-9 s an election takes after its
leader dies. Meanwhile a publish gets "no responders" at once (nats-py does not retry it), and a request to
JetStream's API times out or answers 503. A client that tries again, with the same Nats-Msg-Id, for a bounded
time, gets through once a new leader is elected; JetStream's dedup drops the copy of a try that did land.
The policy (`retry_wait`, `transient`) is pure; `riding_out` is the loop that sleeps.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from nats.errors import ConnectionReconnectingError, NoRespondersError
from nats.js.errors import APIError, NoStreamResponseError, ServiceUnavailableError

log = logging.getLogger(__name__)

T = TypeVar("T")

# How long a client keeps trying through an election (YANTRA_NATS_RETRY_S): twice the longest measured (9 s), and
# a new leader's first seconds of catching up.
ELECTION_RETRY_S = 20.0
FIRST_WAIT_S = 0.1
MAX_WAIT_S = 2.0

# nats-server's error codes (server/errors.json) for "no leader right now": JetStream system temporarily
# unavailable, cluster not assigned to this server, cluster can not handle request (not the leader), stream
# offline, consumer offline.
_JS_NO_LEADER = (10007, 10008, 10009, 10118, 10119)
# JetStream not enabled for the account, not enabled: a 503 that no election ends.
_JS_NOT_ENABLED = (10039, 10076)


def retry_wait(attempt: int, elapsed: float, budget_s: float = ELECTION_RETRY_S) -> float | None:
    """Seconds to wait before the next try, after `attempt` failed tries (1 on) that began `elapsed` seconds ago;
    None: give up. The wait doubles from FIRST_WAIT_S to MAX_WAIT_S (an election is over in seconds, and hundreds
    of clients must not hammer the new leader), and the last try starts no later than `budget_s`."""
    if attempt < 1 or elapsed >= budget_s:
        return None
    wait = min(MAX_WAIT_S, FIRST_WAIT_S * 2 ** min(attempt - 1, 16))
    return min(wait, budget_s - elapsed)


def transient(exc: BaseException, *, idempotent: bool = True) -> bool:
    """Whether `exc` is what a client sees while a leader is being elected (or its server reconnects), so that the
    same request may well succeed in a moment.

    A timeout counts only for an `idempotent` request (a publish with a Nats-Msg-Id, a stream or consumer set-up):
    the server may have done it before its answer was lost, and only then is doing it again harmless.
    "No responders" never reached a stream: it is always safe to send again."""
    if isinstance(exc, NoStreamResponseError | NoRespondersError | ConnectionReconnectingError):
        return True
    if isinstance(exc, ServiceUnavailableError) and exc.err_code is None and not exc.description:
        # nats-py's "no responders" to JetStream's API: no server there has JetStream at all (every node of a
        # cluster serves the API, and answers with a code of its own while it has no leader)
        return False
    if isinstance(exc, APIError):  # before TimeoutError: nothing of JetStream's is both
        if exc.err_code in _JS_NOT_ENABLED:
            return False
        return exc.code == 503 or exc.err_code in _JS_NO_LEADER
    if isinstance(exc, TimeoutError):  # nats-py's is one too
        return idempotent
    return False


async def riding_out(
    op: Callable[[], Awaitable[T]], what: str, budget_s: float = ELECTION_RETRY_S, *, idempotent: bool = True
) -> T:
    """`await op()`, tried again while it fails `transient`ly, as `retry_wait` says; the last error when it gives
    up (or at once, for any other). A `budget_s` of 0: one try."""
    if budget_s <= 0:
        return await op()
    loop = asyncio.get_running_loop()
    started, attempt = loop.time(), 0
    while True:
        try:
            return await op()
        except Exception as exc:
            if not transient(exc, idempotent=idempotent):
                raise
            attempt += 1
            wait = retry_wait(attempt, loop.time() - started, budget_s)
            if wait is None:
                log.info(  # the caller says what failed, in its own words: this is for the service's log
                    "%s: gave up after %d tries in %.1f s (%s)", what, attempt, loop.time() - started, _name(exc)
                )
                raise
            if attempt == 1:  # once per outage, not once per try
                log.info("%s: %s; trying again for up to %g s (a leader election?)", what, _name(exc), budget_s)
        await asyncio.sleep(wait)


def _name(exc: BaseException) -> str:
    if isinstance(exc, APIError) and exc.description:
        return f"{exc.description} ({exc.err_code or exc.code})"
    return type(exc).__name__
