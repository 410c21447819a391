"""Live tailing of the run and metrics streams, kept alive across lost connections.

`LiveTail.run` never raises for a down or vanished server: it reports the link's state through
`on_link` and reconnects with a capped backoff. It does its own reconnecting (the client's is
off) because it must remake its consumers anyway, and because nats-py would otherwise retry an
absent first server forever without saying so. Where it resumes is a stream sequence per stream,
so nothing is skipped or shown twice across a reconnect, even to a restarted server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass

import nats
from nats.errors import NoServersError
from nats.js.errors import NotFoundError

from services.core import events as ev
from services.core.bus import tls_options
from services.core.events import Recorded
from services.core.settings import NatsAuth, NatsTls, nats_servers, redact_url
from tui import jetstream
from tui.model import MAX_METRIC_POINTS

CONNECT_TIMEOUT_S = 3.0
DLQ_POLL_S = 3.0  # how often the dead-letter count is read (one stream info: cheap)
MAX_BACKOFF_S = 5.0


@dataclass(frozen=True)
class Link:
    """The connection as the status bar shows it."""

    state: str  # "connecting" | "connected" | "waiting" | "lost"
    detail: str
    attempt: int = 0


async def _wait(stop: asyncio.Event, seconds: float) -> None:
    with suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


def _why(exc: BaseException) -> str:
    return str(exc).strip() or type(exc).__name__


class LiveTail:
    def __init__(
        self,
        resolve_url: Callable[[], str],
        on_events: Callable[[list[Recorded]], None],
        on_link: Callable[[Link], None],
        keep_metrics: int = MAX_METRIC_POINTS,
        on_dlq: Callable[[int], None] | None = None,
        auth: NatsAuth | None = None,
        tls: NatsTls | None = None,
    ):
        self.resolve_url = resolve_url
        self.auth = auth  # the credential the server requires (YANTRA_ADMIN_TOKEN for `yantra up`'s), if any
        self.tls = tls  # the CA (and client pair) of a TLS server: `yantra up --secure`'s, found on its data dir
        self.on_events = on_events
        self.on_link = on_link
        self.on_dlq = on_dlq
        self.keep_metrics = keep_metrics
        # next stream sequence to read; 0 for metrics means "not started: open with the recent window"
        self.next_seq = {ev.RUNS_STREAM: 1, ev.METRICS_STREAM: 0}

    async def run(self, stop: asyncio.Event) -> None:
        attempt = 0
        while not stop.is_set():
            nc = None
            try:
                url = self.resolve_url()
                self.on_link(Link("connecting", redact_url(url), attempt))  # a URL may carry a password
                nc = await self._connect(url)
                attempt = 0
                await self._tail(nc, url, stop)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a lost or absent server is a state to show, never a crash
                attempt += 1
                wait = min(0.5 * 2 ** (attempt - 1), MAX_BACKOFF_S)
                self.on_link(Link("lost", f"{_why(exc)}; retrying in {wait:.1f}s", attempt))
                await _wait(stop, wait)
            finally:
                if nc is not None:
                    with suppress(Exception):
                        await nc.close()

    async def _connect(self, url: str) -> nats.NATS:
        async def quiet(_exc: Exception) -> None:  # failures surface as exceptions here, not log spam
            return None

        # nats-py keeps trying a refused first server until max_reconnect_attempts is spent, even with
        # reconnects off: one quick retry, then NoServersError, and our own backoff takes over.
        connecting = nats.connect(
            nats_servers(url),  # one server, or a cluster's
            name="yantra-tui",
            connect_timeout=CONNECT_TIMEOUT_S,
            allow_reconnect=False,
            max_reconnect_attempts=1,
            reconnect_time_wait=0.1,
            error_cb=quiet,
            **(self.auth.connect_options() if self.auth else {}),
            **tls_options(url, self.tls),
        )
        try:
            return await asyncio.wait_for(connecting, CONNECT_TIMEOUT_S + 1.0)
        except (TimeoutError, NoServersError) as exc:
            raise ConnectionError(f"no NATS server answered at {redact_url(url)}") from exc

    async def _subscribe(self, js) -> list:
        runs = await jetstream.pull_from(js, ev.RUNS_STREAM, ev.RUN_SUBJECTS, start_seq=self.next_seq[ev.RUNS_STREAM])
        try:
            if not self.next_seq[ev.METRICS_STREAM]:
                self.next_seq[ev.METRICS_STREAM] = await jetstream.metrics_start_seq(js, self.keep_metrics)
            start = self.next_seq[ev.METRICS_STREAM]
            metrics = await jetstream.pull_from(js, ev.METRICS_STREAM, ev.METRICS_SUBJECTS, start_seq=start)
        except BaseException:
            await jetstream.unsubscribe(runs)  # no half-made pair left behind while we wait and retry
            raise
        return [(ev.RUNS_STREAM, runs), (ev.METRICS_STREAM, metrics)]

    def _sink(self, stream: str) -> Callable[[list[Recorded], int], None]:
        def on_batch(batch: list[Recorded], last_seq: int) -> None:
            self.next_seq[stream] = last_seq + 1
            if batch:
                self.on_events(batch)

        return on_batch

    async def _poll_dlq(self, js, stop: asyncio.Event) -> None:
        """Report the dead-letter count now and every DLQ_POLL_S; a failed read waits for the next (a lost
        connection is noticed, and shown, by the tails)."""
        while not stop.is_set():
            with suppress(Exception):
                self.on_dlq(await jetstream.dlq_count(js))
            await _wait(stop, DLQ_POLL_S)

    async def _tail(self, nc: nats.NATS, url: str, stop: asyncio.Event) -> None:
        """Follow both streams until `stop`; raises when the connection goes (the caller reconnects)."""
        js = nc.jetstream()
        url = redact_url(url)  # shown from here on, never used to connect
        while True:
            try:
                subs = await self._subscribe(js)
                break
            except NotFoundError:
                self.on_link(Link("waiting", f"no yantra streams yet (`yantra up` makes them) on {url}"))
                await _wait(stop, 1.0)
                if stop.is_set():
                    return
        self.on_link(Link("connected", url))
        inner = asyncio.Event()
        tasks = [asyncio.create_task(jetstream.follow(psub, self._sink(s), inner)) for s, psub in subs]
        if self.on_dlq is not None:
            tasks.append(asyncio.create_task(self._poll_dlq(js, inner)))
        stopping = asyncio.create_task(stop.wait())
        try:
            done, _ = await asyncio.wait([*tasks, stopping], return_when=asyncio.FIRST_COMPLETED)
        finally:
            inner.set()
            for task in [*tasks, stopping]:
                task.cancel()
            for task in [*tasks, stopping]:
                with suppress(asyncio.CancelledError, Exception):
                    await task
            for _s, psub in subs:
                await jetstream.unsubscribe(psub)
        for task in done:
            if task is not stopping and not task.cancelled() and task.exception() is not None:
                raise task.exception()
        if not nc.is_connected and not stop.is_set():
            raise ConnectionError(f"connection to {url} lost")
