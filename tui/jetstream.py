"""Reading the run and metrics streams for the TUI (the only module here that touches NATS).

The TUI only reads: it creates ephemeral pull consumers with no acks, starting at a stream
sequence it remembers, so after a lost connection it resumes exactly where it stopped and never
shows an event twice. Envelopes are decoded leniently: an event of a type this version does not
know is still shown (as unknown) rather than dropped, unlike a service, which dead-letters it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import suppress
from datetime import UTC, datetime

from google.protobuf.message import DecodeError
from nats.js import JetStreamContext, api
from nats.js.errors import NotFoundError

from services.core import events as ev
from services.core.events import Envelope, Recorded

FETCH_BATCH = 256


def decode_lenient(data: bytes) -> Envelope | None:
    """An envelope whatever its type; None for bytes that are not an envelope at all."""
    env = Envelope()
    try:
        env.ParseFromString(data)
    except DecodeError:
        return None
    return env if env.event_id and env.type else None


async def pull_from(
    js: JetStreamContext,
    stream: str,
    subject: str,
    *,
    start_seq: int | None = None,
    start_time_ns: int | None = None,
) -> JetStreamContext.PullSubscription:
    """An ephemeral, ack-less pull consumer from a stream sequence (or a time); the server drops it when idle."""
    if start_time_ns is not None:
        when = datetime.fromtimestamp(start_time_ns / 1e9, tz=UTC)
        cfg = api.ConsumerConfig(deliver_policy=api.DeliverPolicy.BY_START_TIME, opt_start_time=when)
    else:
        cfg = api.ConsumerConfig(deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start_seq or 1)
    cfg.ack_policy = api.AckPolicy.NONE
    cfg.inactive_threshold = 30.0
    cfg.filter_subject = subject
    return await js.pull_subscribe(subject, stream=stream, config=cfg)


async def fetch_batch(psub: JetStreamContext.PullSubscription, timeout: float) -> tuple[list[Recorded], int, int]:
    """(decoded events, last stream sequence seen or 0, messages still pending); waits up to `timeout`."""
    try:
        msgs = await psub.fetch(FETCH_BATCH, timeout=timeout)
    except TimeoutError:  # nats' own, or asyncio's when the fetch's deadline runs out mid-way (both builtin)
        return [], 0, 0
    out, last, pending = [], 0, 0
    for m in msgs:
        last, pending = m.metadata.sequence.stream, m.metadata.num_pending
        env = decode_lenient(m.data)
        if env is not None:
            out.append(Recorded(last, env))
    return out, last, pending


async def read_to_end(psub: JetStreamContext.PullSubscription, until_ns: int | None = None) -> list[Recorded]:
    """Everything the consumer has now (stopping at the first event later than `until_ns`)."""
    info = await psub.consumer_info()
    remaining = info.num_pending
    out: list[Recorded] = []
    while remaining > 0:
        batch, last, remaining = await fetch_batch(psub, timeout=5.0)
        if not last:
            break
        for rec in batch:
            if until_ns is not None and rec.env.time_unix_ns > until_ns:
                return out
            out.append(rec)
    return out


async def unsubscribe(psub: JetStreamContext.PullSubscription) -> None:
    with suppress(Exception):
        await psub.unsubscribe()


async def read_run(js: JetStreamContext, run_id: str) -> list[Recorded]:
    psub = await pull_from(js, ev.RUNS_STREAM, ev.run_filter(ev.check_run_id(run_id)), start_seq=1)
    try:
        return await read_to_end(psub)
    finally:
        await unsubscribe(psub)


async def read_metrics_between(js: JetStreamContext, start_ns: int, end_ns: int) -> list[Recorded]:
    psub = await pull_from(js, ev.METRICS_STREAM, ev.METRICS_SUBJECTS, start_time_ns=start_ns)
    try:
        return await read_to_end(psub, until_ns=end_ns)
    finally:
        await unsubscribe(psub)


async def metrics_start_seq(js: JetStreamContext, keep: int) -> int:
    """Where to start tailing metrics so the timeline opens with the last `keep` points."""
    info = await js.stream_info(ev.METRICS_STREAM)
    return max(info.state.first_seq, info.state.last_seq - keep + 1, 1)


async def dlq_count(js: JetStreamContext) -> int:
    """How many messages the dead-letter stream holds (0 while it does not exist)."""
    try:
        info = await js.stream_info(ev.DLQ_STREAM)
    except NotFoundError:
        return 0
    return info.state.messages


async def follow(
    psub: JetStreamContext.PullSubscription,
    on_batch: Callable[[list[Recorded], int], None],
    stop: asyncio.Event,
) -> None:
    """Hand every new batch (and the last sequence read) to `on_batch` until `stop` is set."""
    while not stop.is_set():
        batch, last, _pending = await fetch_batch(psub, timeout=1.0)
        if last:
            on_batch(batch, last)
