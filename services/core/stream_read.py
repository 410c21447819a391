"""Reading what a stream holds on a subject, once through: the run log's reads and the DLQ's share it."""

from __future__ import annotations

import asyncio
import time
from contextlib import suppress

from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext, api
from nats.js.errors import ServiceUnavailableError

FETCH_S = 5.0  # one fetch's patience
FETCH_TRIES = 3  # fetches in a row that may time out before a read with messages still pending fails


class ShortRead(NatsTimeoutError):
    """JetStream holds more of a subject's messages than it delivered: a read must not hand back part of a log as if
    it were all of it. A timeout (the callers' retries take it as one: `services.core.retry.transient`)."""

    def __init__(self, subject: str, got: int, missing: int, waited_s: float):
        super().__init__()
        self.subject, self.got, self.missing, self.waited_s = subject, got, missing, waited_s

    def __str__(self) -> str:
        return (
            f"read {self.got} of the {self.got + self.missing} messages on {self.subject}: JetStream delivered none "
            f"of the other {self.missing} in {self.waited_s:g} s"
        )


async def read_msgs(js: JetStreamContext, stream: str, subject: str) -> list:
    """Every message on `subject` in stream order, each once (ShortRead when JetStream stops delivering them)."""
    cfg = api.ConsumerConfig(
        ack_policy=api.AckPolicy.NONE,
        deliver_policy=api.DeliverPolicy.ALL,
        inactive_threshold=30.0,
        filter_subject=subject,
        mem_storage=True,  # see `Bus.tail`
    )
    psub = await js.pull_subscribe(subject, stream=stream, config=cfg)
    try:
        info = await psub.consumer_info()
        return await drain(psub, subject, info.num_pending)
    finally:
        with suppress(Exception):
            await psub.unsubscribe()


async def drain(psub, subject: str, pending: int, *, fetch_s: float = FETCH_S, tries: int = FETCH_TRIES) -> list:
    """The `pending` messages of a pull subscription, in stream order, each once."""
    out: list = []
    remaining, stalled, since = pending, 0, time.monotonic()
    while remaining > 0:
        try:
            msgs = await psub.fetch(min(remaining, 256), timeout=fetch_s)
        except (TimeoutError, ServiceUnavailableError):  # see "Fetch timeouts" in services/core/bus.py; a 503: the
            stalled += 1  # consumer of a cluster has no leader yet (it was just made), which answers at once
            if stalled >= tries:
                raise ShortRead(subject, len(out), remaining, round(time.monotonic() - since, 1)) from None
            await asyncio.sleep(0.5 * stalled)
            continue
        stalled, since = 0, time.monotonic()
        for m in msgs:
            if not out or m.metadata.sequence.stream > out[-1].metadata.sequence.stream:
                out.append(m)
            remaining = m.metadata.num_pending
    return out
