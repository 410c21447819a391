"""Reading what a stream holds on a subject, once through: the run log's reads and the DLQ's share it."""

from __future__ import annotations

from contextlib import suppress

from nats.js import JetStreamContext, api


async def read_msgs(js: JetStreamContext, stream: str, subject: str) -> list:
    """Every message on `subject` in stream order, each once."""
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
        remaining = info.num_pending
        out: list = []
        while remaining > 0:
            try:
                msgs = await psub.fetch(min(remaining, 256), timeout=5.0)
            except TimeoutError:  # see "Fetch timeouts" in services/core/bus.py
                break
            for m in msgs:
                if not out or m.metadata.sequence.stream > out[-1].metadata.sequence.stream:
                    out.append(m)
                remaining = m.metadata.num_pending
        return out
    finally:
        with suppress(Exception):
            await psub.unsubscribe()
