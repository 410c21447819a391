"""The event bus: JetStream streams, publishing with dedup, run logs, durable consumers, dead letters."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import suppress

import nats
from nats.errors import NoServersError
from nats.js import api
from nats.js.errors import NotFoundError

from services.core import events as ev
from services.core.events import Envelope, Recorded

log = logging.getLogger(__name__)

MAX_DELIVER = 5
ACK_WAIT_S = 30.0
DEDUP_WINDOW_S = 600.0
METRICS_MAX_AGE_S = 24 * 3600
METRICS_MAX_MSGS = 100_000
# Fetch timeouts: a fetch that finds nothing raises nats' TimeoutError, or, when its deadline runs out
# between its two pull requests (seen under load), asyncio's; both are the builtin TimeoutError, which
# is what every fetch here catches.


class BusUnavailable(RuntimeError):
    """No NATS server answered at the given URL."""


Handler = Callable[[Recorded], Awaitable[None]]


class Bus:
    def __init__(self, nc: nats.NATS):
        self.nc = nc
        self.js = nc.jetstream()

    @classmethod
    async def connect(cls, url: str, name: str = "yantra", timeout: float = 5.0) -> Bus:
        async def _quiet(_exc: Exception) -> None:  # the reconnect logic reports; don't spam tracebacks
            return None

        try:
            # nats-py retries an unreachable first server forever when reconnects are allowed;
            # bound the first connection so a down server is a clear error, not a hang.
            connecting = nats.connect(
                url,
                name=name,
                connect_timeout=timeout,
                max_reconnect_attempts=-1,
                allow_reconnect=True,
                reconnect_time_wait=0.5,
                error_cb=_quiet,
            )
            nc = await asyncio.wait_for(connecting, timeout + 1.0)
        except (TimeoutError, NoServersError, OSError) as exc:
            raise BusUnavailable(f"cannot reach NATS at {url}: {exc or type(exc).__name__}") from exc
        bus = cls(nc)
        await bus.ensure_streams()
        return bus

    async def close(self) -> None:
        with suppress(Exception):
            await self.nc.drain()

    async def ensure_streams(self) -> None:
        configs = [
            api.StreamConfig(
                name=ev.RUNS_STREAM,
                subjects=[ev.RUN_SUBJECTS],
                storage=api.StorageType.FILE,
                duplicate_window=DEDUP_WINDOW_S,
            ),
            api.StreamConfig(
                name=ev.METRICS_STREAM,
                subjects=[ev.METRICS_SUBJECTS],
                storage=api.StorageType.FILE,
                max_age=METRICS_MAX_AGE_S,
                max_msgs=METRICS_MAX_MSGS,
            ),
            api.StreamConfig(name=ev.DLQ_STREAM, subjects=[ev.DLQ_SUBJECTS], storage=api.StorageType.FILE),
        ]
        for cfg in configs:
            try:
                await self.js.stream_info(cfg.name)
            except NotFoundError:
                with suppress(api.BadRequestError if hasattr(api, "BadRequestError") else Exception):
                    await self.js.add_stream(cfg)

    # ------------------------------------------------------------------ publishing

    async def publish(self, env: Envelope) -> int:
        """Publish a run event; a second publish of the same event id is dropped by the server."""
        ack = await self.js.publish(
            ev.run_subject(env.run_id, env.type),
            ev.encode(env),
            headers={"Nats-Msg-Id": env.event_id},
            timeout=10.0,
        )
        return ack.seq

    async def publish_metrics(self, env: Envelope) -> None:
        await self.js.publish(ev.metrics_subject(env.producer), ev.encode(env), timeout=5.0)

    async def dead_letter(self, service: str, data: bytes, reason: str, subject: str) -> None:
        headers = {"Yantra-Reason": reason[:500], "Yantra-Subject": subject}
        await self.js.publish(ev.dlq_subject(service), data, headers=headers, timeout=5.0)

    # ------------------------------------------------------------------ reading

    async def _read(self, stream: str, subject: str) -> list[tuple[int, bytes, str]]:
        """Every message on `subject` in stream order, as (sequence, data, subject)."""
        cfg = api.ConsumerConfig(
            ack_policy=api.AckPolicy.NONE,
            deliver_policy=api.DeliverPolicy.ALL,
            inactive_threshold=30.0,
            filter_subject=subject,
        )
        psub = await self.js.pull_subscribe(subject, stream=stream, config=cfg)
        try:
            info = await psub.consumer_info()
            remaining = info.num_pending
            out: list[tuple[int, bytes, str]] = []
            while remaining > 0:
                try:
                    msgs = await psub.fetch(min(remaining, 256), timeout=5.0)
                except TimeoutError:
                    break
                for m in msgs:
                    out.append((m.metadata.sequence.stream, m.data, m.subject))
                    remaining = m.metadata.num_pending
            return out
        finally:
            with suppress(Exception):
                await psub.unsubscribe()

    async def read_run(self, run_id: str) -> list[Recorded]:
        """A run's whole log in stream order; undecodable entries are skipped (they went to the DLQ)."""
        out = []
        for seq, data, subject in await self._read(ev.RUNS_STREAM, ev.run_filter(ev.check_run_id(run_id))):
            try:
                out.append(Recorded(seq, ev.decode(data)))
            except ev.BadEvent as exc:
                log.warning("skipping undecodable message seq=%s on %s: %s", seq, subject, exc)
        return out

    async def read_all(self, subject: str = ev.RUN_SUBJECTS) -> list[Recorded]:
        out = []
        for seq, data, _subject in await self._read(ev.RUNS_STREAM, subject):
            with suppress(ev.BadEvent):
                out.append(Recorded(seq, ev.decode(data)))
        return out

    async def tail(
        self, subject: str | Sequence[str] = ev.RUN_SUBJECTS, poll_s: float = 0.5, start_seq: int = 1
    ) -> AsyncIterator[Recorded]:
        """Every run event on `subject` (one filter or several) from `start_seq` on, in stream order,
        then each new one as it lands, each once.

        One ephemeral consumer reads on from the last sequence seen, so following a run costs a fetch
        per new batch instead of a re-read of the whole log. A consumer lost meanwhile (a reconnect that
        outlasted its inactivity threshold) is replaced by one starting after the last event yielded.
        Close it with `contextlib.aclosing` (or let the loop that owns it finish) so the consumer goes.
        """
        subjects = [subject] if isinstance(subject, str) else list(subject)
        next_seq = max(1, start_seq)
        while True:
            cfg = api.ConsumerConfig(
                ack_policy=api.AckPolicy.NONE,
                deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
                opt_start_seq=next_seq,
                inactive_threshold=30.0,
                filter_subjects=subjects,
            )
            psub = await self.js.pull_subscribe(subjects[0], stream=ev.RUNS_STREAM, config=cfg)
            try:
                while True:
                    try:
                        msgs = await psub.fetch(256, timeout=poll_s)
                    except TimeoutError:  # nothing new yet (see "Fetch timeouts" above)
                        continue
                    for m in msgs:
                        seq = m.metadata.sequence.stream
                        next_seq = seq + 1
                        with suppress(ev.BadEvent):
                            yield Recorded(seq, ev.decode(m.data))
            except NotFoundError:
                log.info("tail of %s lost its consumer; resuming at seq %d", subjects, next_seq)
                await asyncio.sleep(poll_s)
            finally:
                with suppress(Exception):
                    await psub.unsubscribe()

    async def run_ids(self) -> list[str]:
        """Runs in the order they were requested."""
        return [r.env.run_id for r in await self.read_all(ev.run_filter("*", "RunRequested"))]

    async def read_dead_letters(self, service: str = "*") -> list[tuple[bytes, dict]]:
        cfg = api.ConsumerConfig(ack_policy=api.AckPolicy.NONE, deliver_policy=api.DeliverPolicy.ALL)
        subject = ev.dlq_subject(service)
        psub = await self.js.pull_subscribe(subject, stream=ev.DLQ_STREAM, config=cfg)
        out = []
        try:
            while True:
                try:
                    msgs = await psub.fetch(256, timeout=0.5)
                except TimeoutError:
                    break
                out += [(m.data, dict(m.headers or {})) for m in msgs]
                if msgs and msgs[-1].metadata.num_pending == 0:
                    break
        finally:
            with suppress(Exception):
                await psub.unsubscribe()
        return out

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
    ) -> None:
        """Pull messages for a durable consumer until `stop` is set.

        Undecodable messages and messages that fail `max_deliver` times go to the dead-letter
        subject and are terminated, so a poison message never blocks the consumer. While a
        handler works, the message is kept in progress so long work is not redelivered.
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
        await self.js.add_consumer(stream, cfg)
        psub = await self.js.pull_subscribe_bind(durable=durable, stream=stream)
        try:
            while not stop.is_set():
                try:
                    msgs = await psub.fetch(1, timeout=1.0)
                except TimeoutError:
                    continue
                except Exception as exc:  # connection trouble: the client reconnects; wait and retry
                    log.warning("%s: fetch failed (%s); retrying", durable, exc)
                    await asyncio.sleep(0.5)
                    continue
                for msg in msgs:
                    await self._dispatch(durable, msg, handler, max_deliver, ack_wait)
        finally:
            # An expired fetch leaves a status message queued; without this, drain() waits 30 s for it.
            with suppress(Exception):
                await psub.unsubscribe()

    async def _dispatch(self, durable: str, msg, handler: Handler, max_deliver: int, ack_wait: float) -> None:
        try:
            env = ev.decode(msg.data)
            if msg.subject.rsplit(".", 1)[-1] != env.type:
                raise ev.BadEvent(f"subject {msg.subject} does not match event type {env.type}")
        except ev.BadEvent as exc:
            log.error("%s: dead-lettering undecodable message on %s: %s", durable, msg.subject, exc)
            await self.dead_letter(durable, msg.data, f"undecodable: {exc}", msg.subject)
            await msg.term()
            return
        recorded = Recorded(msg.metadata.sequence.stream, env)
        keepalive = asyncio.create_task(_keep_in_progress(msg, ack_wait / 3))
        try:
            await handler(recorded)
        except Exception as exc:
            attempts = msg.metadata.num_delivered
            if attempts >= max_deliver:
                log.exception("%s: %s %s failed %d times; dead-lettering", durable, env.type, env.event_id, attempts)
                await self.dead_letter(durable, msg.data, f"failed {attempts} times: {exc!r}", msg.subject)
                await msg.term()
            else:
                log.warning("%s: %s %s failed (attempt %d): %r", durable, env.type, env.event_id, attempts, exc)
                await msg.nak(delay=min(2.0 * attempts, 10.0))
            return
        finally:
            keepalive.cancel()
        await msg.ack()


async def _keep_in_progress(msg, every: float) -> None:
    with suppress(asyncio.CancelledError, Exception):
        while True:
            await asyncio.sleep(every)
            await msg.in_progress()
