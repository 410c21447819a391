"""The event bus: connecting, publishing with dedup, reading and following run logs, durable consumers.

The streams and their limits are in `services.core.streams`, dead letters in `services.core.dead_letters`.

Over 400 lines, one file: the bus is the one object a service holds, and publishing, reading, following and
consuming share its connection, its JetStream context and its mapping of NATS errors to one-line ones; stream set-up
and dead letters already live apart.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass

import nats
from nats.errors import Error as NatsError
from nats.errors import NoServersError
from nats.js import api
from nats.js.errors import APIError, NotFoundError

from services.core import dead_letters as dlq
from services.core import events as ev
from services.core import owners, streams
from services.core.dead_letters import MAX_REASON_CHARS, DeadLetter, dlq_msg_id
from services.core.events import Envelope, Recorded
from services.core.nats_security import (
    TlsSettingError,
    client_ssl_context,
    downgrade_line,
    env_nats_tls,
    refused_line,
    tls_failed,
    tls_failure_line,
    wants_tls,
)
from services.core.retry import ELECTION_RETRY_S, retry_wait, riding_out
from services.core.settings import (
    NatsAuth,
    NatsTls,
    auth_refused,
    env_bus_options,
    env_nats_auth,
    nats_servers,
    redact_url,
    url_has_credentials,
)
from services.core.stream_read import read_msgs
from services.core.streams import (
    _JS_STREAM_FULL,
    DEDUP_WINDOW_S,
    DLQ_COPY_MAX_BYTES,
    DLQ_DEDUP_WINDOW_S,
    DLQ_MAX_AGE_S,
    DLQ_MAX_BYTES,
    DLQ_MAX_MSGS,
    METRICS_MAX_AGE_S,
    METRICS_MAX_MSGS,
    MIN_RESERVED_BYTES,
    RUNS_MAX_BYTES,
    RUNS_MAX_MSG_SIZE,
    _same,
    out_of_storage,
    stream_configs,
)

log = logging.getLogger(__name__)

# What callers import from here; the stream limits live in services.core.streams, dead letters in
# services.core.dead_letters.
__all__ = [
    "ACK_WAIT_S",
    "DEDUP_WINDOW_S",
    "DLQ_COPY_MAX_BYTES",
    "DLQ_DEDUP_WINDOW_S",
    "DLQ_MAX_AGE_S",
    "DLQ_MAX_BYTES",
    "DLQ_MAX_MSGS",
    "MAX_DELIVER",
    "MAX_REASON_CHARS",
    "METRICS_MAX_AGE_S",
    "METRICS_MAX_MSGS",
    "MIN_RESERVED_BYTES",
    "RUNS_MAX_BYTES",
    "RUNS_MAX_MSG_SIZE",
    "Bus",
    "BusClosed",
    "BusUnavailable",
    "DeadLetter",
    "EventRefused",
    "GiveUp",
    "Handler",
    "Undecodable",
    "decode_on",
    "dlq_msg_id",
    "stream_configs",
]

MAX_DELIVER = 5
# How long JetStream waits for an ack before it hands a message out again. Short, so the work of a killed
# service is picked up within seconds of its restart (a service that is stopped hands its message back at
# once, see `_dispatch`). Long work is not cut short: a handler's message is marked in progress every third
# of this, which needs the handler to yield to the event loop (blocking work runs in threads or processes).
ACK_WAIT_S = 5.0
# Fetch timeouts: a fetch that finds nothing raises nats' TimeoutError, or, when its deadline runs out
# between its two pull requests (seen under load), asyncio's; both are the builtin TimeoutError, which
# is what every fetch here (and in `services.core.stream_read`) catches.


class BusUnavailable(RuntimeError):
    """No NATS server answered at the given URL."""


class BusClosed(ConnectionError):
    """The connection was closed for good: nats-py does not reopen a connection the server closed over a protocol
    error (see `Bus.closed`)."""


class EventRefused(RuntimeError):
    """The run log refused an event: it is full, the server is out of storage, the event is larger than any
    event may be, or this connection's user may not publish it (a secure stack: services.core.owners)."""


def publish_refused(violations: list[str], subject: str) -> bool:
    """Whether the server said this connection may not publish to `subject` (nats-py reports it lower-cased)."""
    return any(f'"{subject.lower()}"' in v for v in violations)


Handler = Callable[[Recorded], Awaitable[None]]
# (the event, the last error, deliveries tried): called once a consumer gives up on an event
GiveUp = Callable[[Recorded, str, int], Awaitable[None]]


@dataclass(frozen=True)
class Undecodable:
    """A message in the run stream that is not a valid event on its subject (what consumers dead-letter)."""

    seq: int
    subject: str
    reason: str


def decode_on(subject: str, data: bytes) -> Envelope:
    """The envelope of a message stored on `subject`; BadEvent if it does not decode, or is not the event its
    subject (`yantra.run.<run>.<type>`) says: another type, or another run's.

    An envelope of run A stored on run B's subject would start run A in every service, be read into B's log and
    list A among the runs without A's log holding its request: it is refused here like any other non-event.
    """
    env = ev.decode(data)
    parts = subject.split(".")
    if parts[-1] != env.type:
        raise ev.BadEvent(f"subject {subject} does not match event type {env.type}")
    if len(parts) != 4 or parts[:2] != ["yantra", "run"]:
        raise ev.BadEvent(f"subject {subject} is not a run event's (yantra.run.<run>.<type>)")
    if parts[2] != env.run_id:
        raise ev.BadEvent(f"subject {subject} is run {parts[2]}'s, the envelope run {_shown(env.run_id)}'s")
    try:
        ev.check_run_id(env.run_id)
    except ValueError as exc:
        raise ev.BadEvent(str(exc)) from None
    return env


def _shown(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


def _why(exc: BaseException) -> str:
    text = str(exc).strip()
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, APIError):
        return exc.description or type(exc).__name__
    return text or ("timed out" if isinstance(exc, TimeoutError) else type(exc).__name__)


def tls_options(url: str, tls: NatsTls | None) -> dict[str, object]:
    """nats.connect's TLS options for `url`: a context of `tls`'s files when TLS is asked for (else nats-py
    verifies a server that requires TLS against the system's CAs). TlsSettingError when a file cannot be used."""
    return {"tls": client_ssl_context(tls or NatsTls())} if wants_tls(url, tls) else {}


def spoke_tls(nc: nats.NATS) -> bool:
    # nats-py upgrades to TLS only when the server's INFO asks for it, even with a context or a tls:// URL, and has
    # no public word for whether it did: its INFO, as it kept it, says.
    return bool(getattr(nc, "_server_info", {}).get("tls_required"))


async def connect_plain(
    url: str, name: str, timeout: float, *, auth: NatsAuth | None, reconnect: bool, tls: NatsTls | None = None
) -> nats.NATS:
    """A bare NATS connection: no streams made (it writes nothing), nats-py's error logging kept quiet (the caller
    says what went wrong, in one line). `reconnect`: it rides out a server restart; else one attempt. `tls`: the
    TLS files; None: the environment's (NATS_CA, NATS_CERT, NATS_KEY). Raises what nats-py raises (an authorization
    error: settings.auth_refused tells it; a TLS one: nats_security.tls_failed), TlsSettingError for TLS files that
    cannot be used, or TimeoutError past `timeout` + 1 s. For a reader that must not make the streams (a credential
    check, the supervisor's JetStream probe); a service's connection is `Bus.connect`."""

    async def quiet(_exc: Exception) -> None:
        return None

    reconnects = (
        {"max_reconnect_attempts": -1, "reconnect_time_wait": 0.5} if reconnect else {"max_reconnect_attempts": 1}
    )
    connecting = nats.connect(
        nats_servers(url),
        name=name,
        connect_timeout=timeout,
        allow_reconnect=reconnect,
        error_cb=quiet,
        **reconnects,
        **(auth.connect_options() if auth else {}),
        **tls_options(url, tls or env_nats_tls()),
    )
    return await asyncio.wait_for(connecting, timeout + 1.0)


class Bus:
    def __init__(self, nc: nats.NATS, *, replicas: int | None = None, retry_s: float = 0.0):
        self.nc = nc
        self.js = nc.jetstream()
        self.replicas = replicas  # of each stream it makes (a cluster's nodes); None: the server's default
        self.retry_s = retry_s  # how long a publish or a set-up is tried again through a leader election (0: once)
        # what the server refused this connection's user ("permissions violation for publish to ..."): a refused
        # publish gets no ack, and its timeout alone would not say why
        self.violations: list[str] = []

    @classmethod
    async def connect(
        cls,
        url: str,
        name: str = "yantra",
        timeout: float = 5.0,
        *,
        auth: NatsAuth | None = None,
        replicas: int | None = None,
        retry_s: float | None = None,
        tls: NatsTls | None = None,
    ) -> Bus:
        """Connect and make the streams. `url`: one server, or a cluster's separated by commas. `auth`: the
        credential to present; None: the environment's for `url` (NATS_TOKEN, or NATS_USER and NATS_PASSWORD: how
        a service started by `yantra up` gets the embedded server's). `replicas`, `retry_s`: of the streams it
        makes, and how long it retries through an election; None: the environment's (`env_bus_options`). `tls`: the
        CA (and client certificate) to speak TLS with; None: the environment's (NATS_CA, NATS_CERT, NATS_KEY).
        BusUnavailable, in one line, when no server answers, when it refuses the credential (the error's cause is
        then nats' own, see settings.auth_refused), when its certificate cannot be verified or it wants one this
        client lacks (the cause: ssl's error), or when TLS was asked for and the server does not speak it."""
        auth = auth or env_nats_auth(url)
        tls = tls or env_nats_tls()
        shown = redact_url(url)  # a URL may carry a password: never in a message
        try:
            tls_opts = tls_options(url, tls)
        except TlsSettingError as exc:
            raise BusUnavailable(f"cannot speak TLS to NATS at {shown}: {exc}") from exc
        env_replicas, env_retry_s = env_bus_options()
        replicas = replicas if replicas is not None else env_replicas
        retry_s = retry_s if retry_s is not None else env_retry_s
        several = len(nats_servers(url)) > 1 or (replicas or 1) > 1
        errors: list[Exception] = []  # the last one only: the callback lives as long as the connection
        violations: list[str] = []  # the bus's own list: what the server refused this user, the latest few
        refused: asyncio.Future = asyncio.get_running_loop().create_future()

        async def _quiet(exc: Exception) -> None:  # the reconnect logic reports; don't spam tracebacks
            errors[:] = [exc]
            if "permissions violation" in str(exc).lower():
                violations[:] = [*violations[-15:], str(exc).lower()]
            # a wrong credential, or a certificate that cannot be verified, stays wrong: no use retrying
            if (auth_refused(exc) or tls_failed(exc)) and not refused.done():
                refused.set_result(exc)

        # nats-py retries an unreachable first server forever when reconnects are allowed;
        # bound the first connection so a down server is a clear error, not a hang.
        connecting = asyncio.ensure_future(
            nats.connect(
                nats_servers(url),
                name=name,
                connect_timeout=timeout,
                max_reconnect_attempts=-1,
                allow_reconnect=True,
                reconnect_time_wait=0.5,
                error_cb=_quiet,
                **(auth.connect_options() if auth else {}),
                **tls_opts,
            )
        )
        try:
            await asyncio.wait([connecting, refused], timeout=timeout + 1.0, return_when=asyncio.FIRST_COMPLETED)
        finally:  # refused, timed out or cancelled: stop nats-py's retrying
            if not connecting.done():
                connecting.cancel()
                await asyncio.wait([connecting])
        if refused.done() and connecting.cancelled():
            cause = refused.result()
            line = refused_line(url, auth) if auth_refused(cause) else tls_failure_line(url, tls, cause)
            raise BusUnavailable(line) from cause
        try:
            if connecting.cancelled():
                raise TimeoutError
            nc = connecting.result()
        except (TimeoutError, NoServersError, OSError) as exc:
            # The attempts' own errors say more than the timeout that ended them ("connection refused").
            why = _why(errors[-1]) if errors else _why(exc)
            if isinstance(exc, TimeoutError) and not errors:
                why = f"no answer within {timeout + 1.0:g} s"
            raise BusUnavailable(f"cannot reach NATS at {shown}: {why}") from exc
        if tls_opts and not spoke_tls(nc):
            # Told to speak TLS (a CA, a client certificate, a tls:// URL) to a server that does not: a server set up
            # without it, or someone between that strips it. The credential went with CONNECT already (nats-py has
            # no hook between the server's INFO and it); stopping here keeps every event off the clear connection.
            await nc.close()
            raise BusUnavailable(downgrade_line(url, bool(auth) or url_has_credentials(url)))
        if retry_s is None:  # elections happen on a cluster only: one server answers as before, at once
            retry_s = ELECTION_RETRY_S if several or _clustered(nc) else 0.0
        bus = cls(nc, replicas=replicas, retry_s=retry_s)
        bus.violations = violations
        try:
            await bus.ensure_streams()
        except BaseException:  # JetStream did not answer: a connection left open would reconnect for ever
            await nc.close()
            raise
        return bus

    async def close(self) -> None:
        with suppress(Exception):
            await self.nc.drain()

    async def ensure_streams(self) -> None:
        """Create the streams, or bring an existing one's limits to `stream_configs()` (old data dirs); tried
        again through a leader election."""
        await streams.ensure_streams(self.js, self.replicas, self.retry_s)

    # ------------------------------------------------------------------ publishing

    async def publish(self, env: Envelope) -> int:
        """Publish a run event; a second publish of the same event id is dropped by the server, so a publish that
        meets a leader election (no responders, a timeout) is sent again, same id, for up to `retry_s`.

        EventRefused, in one line, when the log will not take it: larger than an event may be (checked here,
        before anything is sent), the log full, or the server out of storage.
        """
        data, headers = ev.encode(env), {"Nats-Msg-Id": env.event_id}
        size, limit = len(data) + dlq.headers_size(headers), min(RUNS_MAX_MSG_SIZE, self.nc.max_payload)
        if size > limit:
            # The stream would refuse it; past the server's max_payload the server would close this connection.
            which = "RUNS_MAX_MSG_SIZE" if limit == RUNS_MAX_MSG_SIZE else "the NATS server's max_payload"
            raise EventRefused(
                f"{ev.RUNS_STREAM} refused {env.type} of run {env.run_id}: {size:,} bytes with its headers, "
                f"over the {limit:,}-byte limit of an event ({which}); nothing was sent"
            )
        subject = ev.run_subject(env.run_id, env.type)
        try:
            ack = await riding_out(
                lambda: self.js.publish(subject, data, headers=headers, timeout=10.0),
                f"publish {env.type} of run {env.run_id}",
                self.retry_s,
            )
        except APIError as exc:
            refused = f"{ev.RUNS_STREAM} refused {env.type} of run {env.run_id}"
            if out_of_storage(exc.err_code, exc.description):
                raise EventRefused(
                    f"{refused}: the NATS server is out of storage ({_why(exc)}, code {exc.err_code}); "
                    "free disk where it keeps JetStream, or raise its max_file_store"
                ) from exc
            if exc.err_code in _JS_STREAM_FULL:
                raise EventRefused(f"{refused}: {_why(exc)} (the run log never drops old events to make room)") from exc
            raise
        except Exception as exc:
            if publish_refused(self.violations, subject):
                raise EventRefused(
                    f"{ev.RUNS_STREAM} refused {env.type} of run {env.run_id}: the NATS server does not let this "
                    f"connection's user publish it (on a secure stack only {', '.join(owners.owners(env.type))} "
                    "may: services.core.owners)"
                ) from exc
            raise
        return ack.seq

    async def publish_metrics(self, env: Envelope) -> None:
        await self.js.publish(ev.metrics_subject(env.producer), ev.encode(env), timeout=5.0)

    async def dead_letter(
        self, service: str, data: bytes, reason: str, subject: str, *, stream: str = "", seq: int = 0, mine: bool = True
    ) -> None:
        """Put a copy of a message nobody can handle on the DLQ, with why and where from in its headers.

        With its stream sequence, the copy gets an id (`dlq_msg_id`) so it is stored once: per service
        (`mine`: this service's handler failed it), or once for all (it is undecodable for everyone). A message
        too large to copy whole beside its headers is copied in part (`dead_letters.fit_copy`).
        """
        headers = dlq.dead_letter_headers(service, reason, subject, stream=stream, seq=seq, mine=mine)
        data, headers = dlq.fit_copy(data, headers, self.nc.max_payload)
        await riding_out(  # a timeout is retried only with an id: without one a second copy could be stored
            lambda: self.js.publish(ev.dlq_subject(service), data, headers=headers, timeout=5.0),
            f"dead letter of {service}",
            self.retry_s,
            idempotent="Nats-Msg-Id" in headers,
        )

    # ------------------------------------------------------------------ reading

    async def _read_msgs(self, stream: str, subject: str) -> list:
        """Every message on `subject` in stream order, each once; read again from the start while the stream has no
        leader to make its reader (an election)."""
        return await riding_out(lambda: read_msgs(self.js, stream, subject), f"read of {subject}", self.retry_s)

    async def _read(self, stream: str, subject: str) -> list[tuple[int, bytes, str]]:
        """Every message on `subject` in stream order, as (sequence, data, subject)."""
        return [(m.metadata.sequence.stream, m.data, m.subject) for m in await self._read_msgs(stream, subject)]

    async def read_run(self, run_id: str) -> list[Recorded]:
        """A run's whole log in stream order; what is not an event of its subject (`decode_on`) is skipped with
        a warning (consumers dead-lettered it)."""
        out = []
        for seq, data, subject in await self._read(ev.RUNS_STREAM, ev.run_filter(ev.check_run_id(run_id))):
            entry = _entry(seq, subject, data, include_bad=False)
            if entry is not None:
                out.append(entry)
        return out

    async def read_all(self, subject: str = ev.RUN_SUBJECTS, *, include_bad: bool = False) -> list:
        """Every event on `subject` in stream order. What is not an event of its subject is skipped with a
        warning, unless `include_bad`: then each is an `Undecodable` in its place (judged as consumers judge it,
        `decode_on`)."""
        out = []
        for seq, data, subject_ in await self._read(ev.RUNS_STREAM, subject):
            entry = _entry(seq, subject_, data, include_bad)
            if entry is not None:
                out.append(entry)
        return out

    async def tail(
        self,
        subject: str | Sequence[str] = ev.RUN_SUBJECTS,
        poll_s: float = 0.5,
        start_seq: int = 1,
        *,
        include_bad: bool = False,
    ) -> AsyncIterator:
        """Every run event on `subject` (one filter or several) from `start_seq` on, in stream order,
        then each new one as it lands, each once (`include_bad`: as `read_all`).

        One ephemeral consumer reads on from the last sequence seen, so following a run costs a fetch
        per new batch instead of a re-read of the whole log. Where to resume is kept here, not in the
        server: the consumer lives in the server's memory only, so a restarted server has none, and the
        tail makes a new one after the last event yielded (a consumer on disk came back from a killed
        server with the position it had last flushed, and handed out again what had been yielded since).
        Nothing at or below the last sequence yielded is ever yielded again, whatever the consumer does.
        Close it with `contextlib.aclosing` (or let the loop that owns it finish) so the consumer goes.
        """
        subjects = [subject] if isinstance(subject, str) else list(subject)
        last = max(1, start_seq) - 1
        task = asyncio.current_task()
        while True:
            psub = None
            try:
                cfg = api.ConsumerConfig(
                    ack_policy=api.AckPolicy.NONE,
                    deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
                    opt_start_seq=last + 1,
                    inactive_threshold=30.0,
                    filter_subjects=subjects,
                    mem_storage=True,
                )
                psub = await self.js.pull_subscribe(subjects[0], stream=ev.RUNS_STREAM, config=cfg)
                rewound = False
                while not rewound:
                    # A cancel nats-py's fetch swallowed (its asyncio.wait_for on Python 3.11 returns a reply that
                    # came at the same moment instead): honoured here, or the tail polls on forever and whoever
                    # cancelled it waits for good (bench/load_runs.py: the profiler stuck, 97 of 100 runs lost).
                    if task is not None and task.cancelling():
                        raise asyncio.CancelledError
                    try:
                        msgs = await psub.fetch(256, timeout=poll_s)
                    except TimeoutError:  # nothing new yet (see "Fetch timeouts" above)
                        continue
                    for m in msgs:
                        seq = m.metadata.sequence.stream
                        if seq <= last:
                            rewound = True
                            continue
                        last = seq
                        entry = _entry(seq, m.subject, m.data, include_bad)
                        if entry is not None:
                            yield entry
                if rewound:
                    log.warning("tail of %s: its consumer went back before seq %d; making a new one", subjects, last)
            except (NatsError, TimeoutError) as exc:  # the consumer is gone, the server restarts, the connection drops
                if self.nc.is_closed:
                    raise
                log.info("tail of %s lost its consumer (%s); resuming at seq %d", subjects, _why(exc), last + 1)
                await asyncio.sleep(poll_s)
            finally:
                if psub is not None:
                    with suppress(Exception):
                        await psub.unsubscribe()

    async def run_ids(self) -> list[str]:
        """Runs in the order they were requested, each once (a run whose request is stored twice, under two ids,
        is still one run)."""
        return list(dict.fromkeys(r.env.run_id for r in await self.read_all(ev.run_filter("*", "RunRequested"))))

    async def closed(self, poll_s: float = 0.5) -> str:
        """Return, saying why, once this connection is closed for good.

        nats-py reconnects by itself to a server that went away, but a connection the server closed over a
        protocol error (a message with its headers over the server's max_payload, say) is not reopened: every
        later fetch and publish fails, and a service on it is alive but deaf. `service_main.serve` exits on it, so
        the supervisor starts the service again.
        """
        while not self.nc.is_closed:
            await asyncio.sleep(poll_s)
        return self._closed_why()

    def _closed_why(self) -> str:
        return _why(self.nc.last_error) if self.nc.last_error else "closed"

    async def dead_letters(self, service: str = "*") -> list[DeadLetter]:
        """Every entry of the DLQ (of one service, or all), oldest first."""
        return await dlq.list_dead_letters(self.js, service)

    async def read_dead_letters(self, service: str = "*") -> list[tuple[bytes, dict]]:
        return [(d.data, d.headers) for d in await self.dead_letters(service)]

    async def get_dead_letter(self, seq: int) -> DeadLetter | None:
        """The DLQ entry with this sequence, or None when there is none (never was, or aged out)."""
        return await dlq.get_dead_letter(self.js, seq)

    async def dead_letter_count(self) -> int:
        return await dlq.count_dead_letters(self.js)

    # ------------------------------------------------------------------ consuming

    async def consume(
        self,
        durable: str,
        subjects: list[str],
        handler: Handler,
        stop: asyncio.Event,
        *,
        max_deliver: int = MAX_DELIVER,
        ack_wait: float = ACK_WAIT_S,
        stream: str = ev.RUNS_STREAM,
        on_give_up: GiveUp | None = None,
    ) -> None:
        """Pull messages for a durable consumer until `stop` is set.

        Undecodable messages and messages that fail `max_deliver` times go to the dead-letter
        subject and are terminated, so a poison message never blocks the consumer; for the latter,
        `on_give_up(event, error, attempts)` is called after (the runner ends the event's run with it). While a
        handler works, the message is kept in progress so long work is not redelivered; when
        `stop` is set (or this is cancelled) mid-work, the message is handed back at once.
        """
        cfg = api.ConsumerConfig(
            durable_name=durable,
            ack_policy=api.AckPolicy.EXPLICIT,
            deliver_policy=api.DeliverPolicy.ALL,
            max_deliver=max_deliver,
            ack_wait=ack_wait,
            filter_subjects=subjects,
            max_ack_pending=64,
        )
        await riding_out(lambda: self._ensure_durable(stream, cfg), f"consumer {durable}", self.retry_s)
        psub = await self.js.pull_subscribe_bind(durable=durable, stream=stream)
        outage = 0  # fetches failed in a row: the pause before the next grows (retry_wait) through an election
        try:
            while not stop.is_set():
                try:
                    msgs = await psub.fetch(1, timeout=1.0)
                    outage = 0
                except TimeoutError:
                    outage = 0
                    continue
                except Exception as exc:  # connection trouble, or no leader: the client reconnects; wait and retry
                    if self.nc.is_closed:  # it will not: retrying would leave this consumer deaf for good
                        why = self._closed_why()
                        raise BusClosed(f"{durable}: the NATS connection was closed for good ({why})") from exc
                    outage += 1
                    if outage == 1 or outage % 30 == 0:  # an election's 503s: said once, then every minute or so
                        log.warning("%s: fetch failed (%s); retrying", durable, _why(exc) or type(exc).__name__)
                    await asyncio.sleep(retry_wait(outage, 0.0, math.inf) or 0.5)  # never gives up on its stream
                    continue
                for msg in msgs:
                    await self._dispatch(durable, msg, handler, max_deliver, ack_wait, stop, on_give_up)
        finally:
            # An expired fetch leaves a status message queued; without this, drain() waits 30 s for it.
            with suppress(Exception):
                await psub.unsubscribe()

    async def _ensure_durable(self, stream: str, want: api.ConsumerConfig) -> None:
        """Create the durable, or bring an existing one to `want` (one made with another ack wait, say).

        nats-server (2.10 on) updates a durable in place; what it cannot update, or refuses to, is handled
        by making the durable again at its ack floor, so nothing already acknowledged is handed out again.
        """
        durable = want.durable_name
        try:
            have = (await self.js.consumer_info(stream, durable)).config
        except NotFoundError:
            await self.js.add_consumer(stream, want)
            return
        # Where a durable starts is fixed when it is made (and refused as a change); keep it.
        want = want.evolve(
            deliver_policy=have.deliver_policy, opt_start_seq=have.opt_start_seq, opt_start_time=have.opt_start_time
        )
        if _consumer_matches(have, want):
            return
        try:
            info = await self.js.add_consumer(stream, want)
            if _consumer_matches(info.config, want):
                log.info("%s: consumer updated (ack wait %gs)", durable, want.ack_wait)
                return
            why = "the server kept the old settings"
        except APIError as exc:
            why = _why(exc)
        info = await self.js.consumer_info(stream, durable)
        start = info.ack_floor.stream_seq + 1
        log.warning("%s: consumer cannot be updated in place (%s); making it again from seq %d", durable, why, start)
        await self.js.delete_consumer(stream, durable)
        await self.js.add_consumer(
            stream,
            want.evolve(deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start, opt_start_time=None),
        )

    async def _dispatch(
        self,
        durable: str,
        msg,
        handler: Handler,
        max_deliver: int,
        ack_wait: float,
        stop: asyncio.Event,
        on_give_up: GiveUp | None = None,
    ) -> None:
        try:
            env = decode_on(msg.subject, msg.data)
        except ev.BadEvent as exc:
            log.error("%s: dead-lettering undecodable message on %s: %s", durable, msg.subject, exc)
            await self._dead_letter_msg(durable, msg, f"undecodable: {exc}", mine=False, max_deliver=max_deliver)
            return
        recorded = Recorded(msg.metadata.sequence.stream, env)
        keepalive = asyncio.create_task(_keep_in_progress(msg, ack_wait / 3))
        work = asyncio.create_task(handler(recorded))
        stopping = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait([work, stopping], return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # the service is shutting down: hand the message back at once
            await self._hand_back(durable, msg, work)
            raise
        finally:
            keepalive.cancel()
            stopping.cancel()
        if not work.done():  # stopped mid-work
            await self._hand_back(durable, msg, work)
            return
        exc = work.exception() if not work.cancelled() else asyncio.CancelledError("the handler was cancelled")
        if exc is None:
            await msg.ack()
            return
        attempts = msg.metadata.num_delivered
        if attempts >= max_deliver:
            log.error(
                "%s: %s %s failed %d times; dead-lettering", durable, env.type, env.event_id, attempts, exc_info=exc
            )
            await self._dead_letter_msg(
                durable, msg, f"failed {attempts} times: {exc!r}", mine=True, max_deliver=max_deliver
            )
            if on_give_up is not None:
                try:
                    await on_give_up(recorded, repr(exc), attempts)
                except Exception as hook_exc:  # the dead letter is filed; the run stays as it was
                    log.error("%s: could not record giving up on %s: %s", durable, env.event_id, _why(hook_exc))
        else:
            log.warning("%s: %s %s failed (attempt %d): %r", durable, env.type, env.event_id, attempts, exc)
            await msg.nak(delay=min(2.0 * attempts, 10.0))

    async def _hand_back(self, durable: str, msg, work: asyncio.Task) -> None:
        """Stop the handler and NAK its message with no delay: the next consumer to ask gets it now,
        instead of after the ack wait."""
        work.cancel()
        with suppress(Exception):
            await asyncio.wait([work], timeout=1.0)
        try:
            await msg.nak()
            await self.nc.flush(timeout=2)
            log.info("%s: stopping; handed seq %d back for redelivery", durable, msg.metadata.sequence.stream)
        except Exception as exc:  # the connection is gone: the ack wait brings it back instead
            log.warning("%s: could not hand seq %d back (%s)", durable, msg.metadata.sequence.stream, _why(exc))

    async def _dead_letter_msg(self, durable: str, msg, reason: str, *, mine: bool, max_deliver: int) -> None:
        """Copy the message to the DLQ and terminate it. Where the copy cannot be made, the message comes back
        to be tried again, until its deliveries are spent: then it is terminated all the same, and said so
        loudly. A message the server no longer hands out but nobody terminated would stay pending for good, and
        `max_ack_pending` of those stop the consumer."""
        meta = msg.metadata
        seq = meta.sequence.stream
        try:
            await self.dead_letter(durable, msg.data, reason, msg.subject, stream=meta.stream, seq=seq, mine=mine)
        except Exception as exc:
            if meta.num_delivered < max_deliver:
                log.error("%s: could not dead-letter seq %d (%s); it will come back", durable, seq, _why(exc))
                with suppress(Exception):
                    await msg.nak(delay=5.0)
                return
            log.critical(
                "%s: could not dead-letter seq %d on %s in %d deliveries (%s); terminating it WITHOUT a DLQ copy "
                "(it stays in %s; `yantra events` shows it): %s",
                durable, seq, msg.subject, meta.num_delivered, _why(exc), meta.stream, reason,
            )  # fmt: skip
        with suppress(Exception):
            await msg.term()


def _clustered(nc: nats.NATS) -> bool:
    """Whether the server `nc` is connected to is a node of a cluster: its INFO names the cluster (nats-py keeps
    INFO in a private attribute; none there reads as one server)."""
    info = getattr(nc, "_server_info", None)
    return isinstance(info, dict) and bool(info.get("cluster"))


def _entry(seq: int, subject: str, data: bytes, include_bad: bool) -> Recorded | Undecodable | None:
    """A stored message as readers get it: an event only when it is the event its subject says (`decode_on`), as
    consumers judge it; else an `Undecodable` where asked for, or nothing (and a warning naming it)."""
    try:
        return Recorded(seq, decode_on(subject, data))
    except ev.BadEvent as exc:
        if include_bad:
            return Undecodable(seq, subject, str(exc))
        log.warning("skipping seq %d on %s: not an event of its subject (%s)", seq, subject, _shown(str(exc), 300))
        return None


def _subjects(cfg: api.ConsumerConfig) -> list[str]:
    return sorted(cfg.filter_subjects or ([cfg.filter_subject] if cfg.filter_subject else []))


def _consumer_matches(have: api.ConsumerConfig, want: api.ConsumerConfig) -> bool:
    return (
        have.ack_policy == want.ack_policy
        and _same(have.ack_wait or 0, want.ack_wait or 0)
        and have.max_deliver == want.max_deliver
        and have.max_ack_pending == want.max_ack_pending
        and _subjects(have) == _subjects(want)
    )


async def _keep_in_progress(msg, every: float) -> None:
    with suppress(asyncio.CancelledError, Exception):
        while True:
            await asyncio.sleep(every)
            await msg.in_progress()
