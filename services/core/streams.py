"""The JetStream streams and their limits: what each keeps, and making or updating them on a server's disk."""

from __future__ import annotations

import logging

from nats.js import JetStreamContext, api
from nats.js.errors import APIError, BadRequestError, NotFoundError, ServiceUnavailableError

from services.core import events as ev
from services.core.retry import ELECTION_RETRY_S, riding_out, transient

log = logging.getLogger(__name__)

# How long YANTRA_RUNS remembers an event id, dropping a second publish of it. A handler's answers have ids derived
# from their trigger, so a trigger handed to a second consumer while the first still works (its in-progress marks
# lost) is answered twice up to the longest handling (the judge's 600 s CPU sandbox, the profiler's 600 s call
# deadline) plus an ack wait apart: 600 s, the old window, let that second copy in. Three times the longest handling
# leaves room for the served measure beside a profile and a slow redelivery; ids are a few dozen bytes each in the
# server's memory. `services.core.bus_limits` checks it against the settings at every service's start.
DEDUP_WINDOW_S = 1800.0
METRICS_MAX_AGE_S = 24 * 3600
METRICS_MAX_MSGS = 100_000

# YANTRA_RUNS is the event-sourced log: no old event may ever be dropped, so when a limit is reached the
# stream refuses new events (DiscardPolicy.NEW: the publisher gets an error) instead of making room.
# The largest legit event is a CandidateProposed: at most the judge's MAX_SOURCE_CHARS (200,000) of kernel
# source plus its contract, about 200 KB, or a ProfileCaptured holding the served model's own norm weights (at most
# 320 KiB of them, services.server.live_parameters; without them a few KB: 4.3 KB in tests/tui/data/real_run.jsonl,
# whose largest CandidateProposed is 3.9 KB). 512 KiB leaves room beside either, and is half of nats-server's
# default max_payload (1 MiB), which bounds a message with its headers: a dead letter is a copy of the message
# plus a few KB of headers (the reason, where it came from), so any event the log accepts can be dead-lettered
# whole. At 1 MiB an event the log accepted could not be: its copy broke the payload limit, and the server closed
# the connection of the service that tried (`DLQ_COPY_MAX_BYTES` below copies a prefix of anything larger).
RUNS_MAX_MSG_SIZE = 512 << 10
# A recorded run is about 25 KB (tests/tui/data/real_run.jsonl; more with many candidates), so this is
# hundreds of thousands of runs. JetStream reserves a stream's max_bytes on its disk up front: a server with
# less room gets the largest power-of-two fraction that fits (see `_reserving`).
RUNS_MAX_BYTES = 16 << 30
# YANTRA_DLQ holds copies of what no service could handle: bounded in count, age and size, oldest first out.
# 3,000 garbage messages once made 6,000 entries here with no limit at all.
DLQ_MAX_MSGS = 10_000
DLQ_MAX_AGE_S = 14 * 24 * 3600
DLQ_MAX_BYTES = 1 << 30
# A dead letter holds the original's bytes up to this many (what the log accepts, so an event is copied whole); of
# a larger message (stored before the log's limit came down, or in a stream of another make) it holds the first
# this many, and its headers the original's size and sha256 (`services.core.dead_letters.fit_copy`). Less where
# the server's max_payload leaves less room beside the headers.
DLQ_COPY_MAX_BYTES = RUNS_MAX_MSG_SIZE
# A message is dead-lettered once (its Nats-Msg-Id is derived from where it was stored, see
# `services.core.dead_letters.dlq_msg_id`); the DLQ remembers ids this long, so a service that comes back
# after longer could add one more copy.
DLQ_DEDUP_WINDOW_S = 24 * 3600
# The least `_reserving` settles for (and never less than twice what a stream holds): below it, no limit.
MIN_RESERVED_BYTES = 64 << 20
# nats-server's error codes (server/errors.json) for "the disk cannot hold this stream's max_bytes", for "the
# stream is full" and for "the server is out of storage".
_JS_INSUFFICIENT_RESOURCES = 10047
# On a cluster the same comes as "no suitable peers for placement" (insufficient resources): no node has room for
# a replica of that size. With a node down, or a cluster still forming, it also means too few nodes: halving then
# fails to the end, even with no byte limit, and `ensure_stream` says so as a 503, which set-up rides out (the node
# may join in a moment: a cluster's nodes find each other over their routes a few seconds after they start).
_JS_NO_SUITABLE_PEERS = 10005
_JS_CANNOT_RESERVE = (_JS_INSUFFICIENT_RESOURCES, _JS_NO_SUITABLE_PEERS)
# message size exceeds maximum allowed; storing failed (its text says why: maximum bytes or messages exceeded)
_JS_STREAM_FULL = (10054, 10077)
# resource limits exceeded for account; insufficient resources (seen when the server's max_file_store is used
# up); insufficient memory resources; insufficient storage resources
_JS_OUT_OF_STORAGE = (10002, 10023, 10028, 10047)
# How the same reach a publisher under codes of their own (a write the disk refused is a 10077 "storing failed")
_OUT_OF_STORAGE_WORDS = ("insufficient storage", "insufficient resources", "resource limits exceeded", "no space left")


def out_of_storage(err_code: int | None, description: str | None) -> bool:
    """Whether a JetStream error says the server has no room left to store (its disk, or its storage limit)."""
    text = (description or "").lower()
    return err_code in _JS_OUT_OF_STORAGE or any(words in text for words in _OUT_OF_STORAGE_WORDS)


def stream_configs(replicas: int | None = None) -> list[api.StreamConfig]:
    """The streams and their limits, the log last: on a server with little disk it takes what the others
    leave (a stream with no byte limit cannot even be made once every byte is reserved). `replicas`: on a
    cluster, how many nodes keep each (None: the server's default, one)."""
    streams = [
        api.StreamConfig(
            name=ev.DLQ_STREAM,
            subjects=[ev.DLQ_SUBJECTS],
            storage=api.StorageType.FILE,
            max_msgs=DLQ_MAX_MSGS,
            max_age=DLQ_MAX_AGE_S,
            max_bytes=DLQ_MAX_BYTES,
            discard=api.DiscardPolicy.OLD,
            duplicate_window=DLQ_DEDUP_WINDOW_S,
        ),
        api.StreamConfig(
            name=ev.METRICS_STREAM,
            subjects=[ev.METRICS_SUBJECTS],
            storage=api.StorageType.FILE,
            max_age=METRICS_MAX_AGE_S,
            max_msgs=METRICS_MAX_MSGS,
        ),
        api.StreamConfig(
            name=ev.RUNS_STREAM,
            subjects=[ev.RUN_SUBJECTS],
            storage=api.StorageType.FILE,
            duplicate_window=DEDUP_WINDOW_S,
            max_msg_size=RUNS_MAX_MSG_SIZE,
            max_bytes=RUNS_MAX_BYTES,
            discard=api.DiscardPolicy.NEW,
        ),
    ]
    return [cfg.evolve(num_replicas=replicas) for cfg in streams] if replicas and replicas > 1 else streams


# What ensure_streams keeps equal to stream_configs() on a stream that exists already.
# num_replicas only when asked for (a cluster's `yantra up`): a client that does not say leaves a stream as it is.
_STREAM_LIMITS = ("max_msgs", "max_bytes", "max_age", "max_msg_size", "discard", "duplicate_window", "num_replicas")


def _same(have, want) -> bool:
    if isinstance(want, float | int) and isinstance(have, float | int):
        return abs(have - want) < 1e-3
    return have == want


async def ensure_streams(js: JetStreamContext, replicas: int | None = None, retry_s: float = ELECTION_RETRY_S) -> None:
    """Create the streams, or bring an existing one's limits to `stream_configs()` (old data dirs). Each is tried
    again for `retry_s` while JetStream has no leader (a cluster electing one, or still forming)."""
    for want in stream_configs(replicas):
        await riding_out(lambda want=want: ensure_stream(js, want), f"stream {want.name}", retry_s)


async def ensure_stream(js: JetStreamContext, want: api.StreamConfig) -> None:
    try:
        info = await js.stream_info(want.name)
    except NotFoundError:
        try:
            await _reserving(js.add_stream, want, used=0)
            return
        except BadRequestError as exc:
            if exc.err_code == _JS_NO_SUITABLE_PEERS:  # not the disk (no byte limit was left): too few nodes are up
                raise ServiceUnavailableError(
                    code=503, err_code=exc.err_code, description=f"{exc.description}: fewer nodes are up than "
                    f"stream {want.name} has replicas ({want.num_replicas})",
                ) from exc  # fmt: skip
            info = await js.stream_info(want.name)  # made meanwhile by another process starting at the same time
    have = info.config
    changed = {
        f: getattr(want, f)
        for f in _STREAM_LIMITS
        if getattr(want, f) not in (None, 0) and not _same(getattr(have, f), getattr(want, f))  # 0, None: unset
    }
    if not changed:
        return
    what = ", ".join(f"{k}={v}" for k, v in changed.items())
    log.info("stream %s: updating %s", want.name, what)
    try:
        await _reserving(js.update_stream, have.evolve(**changed), used=info.state.bytes)
    except APIError as exc:  # it works with the limits it has: a reader must not fail on a disk too full to update
        if transient(exc):  # no leader to ask right now: ensure_streams asks again
            raise
        log.warning("stream %s keeps its limits (%s not set): %s", want.name, what, exc.description or exc)


async def _reserving(op, cfg: api.StreamConfig, used: int) -> None:
    """`op(cfg)`, with max_bytes halved while the server cannot reserve that much disk for it.

    Never below twice what the stream holds (a full log refuses every event), nor MIN_RESERVED_BYTES:
    past that the stream keeps no byte limit rather than one that would stop it.
    """
    wanted = cfg.max_bytes
    while True:
        try:
            await op(cfg)
            break
        except APIError as exc:
            if exc.err_code not in _JS_CANNOT_RESERVE or not cfg.max_bytes or cfg.max_bytes < 0:
                raise
            smaller = cfg.max_bytes // 2
            if smaller < max(MIN_RESERVED_BYTES, 2 * used):
                log.warning("stream %s: no room to reserve even %d bytes; keeping no byte limit", cfg.name, wanted)
                cfg = cfg.evolve(max_bytes=-1)
            else:
                cfg = cfg.evolve(max_bytes=smaller)
    if wanted and cfg.max_bytes != wanted:
        log.info("stream %s: max_bytes %d (%d would not fit on the server's disk)", cfg.name, cfg.max_bytes, wanted)
