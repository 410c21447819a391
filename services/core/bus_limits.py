"""The bus's limits that must agree with one another, in one place, and the relations between them (pure).

The limits live where they act: the streams' in `services.core.streams`, the consumers' (ack wait, deliveries, the
in-progress marks) in `services.core.bus`, the longest handling of one event in the judge (its sandbox timeout) and
the profiler (its call deadline), the election retry in `services.core.retry`. Each is sound alone; what breaks is a
pair that no longer agrees (a judge timeout raised past the dedup window stores a redelivered answer twice), and
nothing says so until a run's log holds two copies of one event. `limit_problems` states every broken relation in one
sentence naming both limits; every service checks them at start (`services.core.service_main.settings_or_exit`:
one line, exit status 2, a configuration error `yantra up` does not restart).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from services.core import dead_letters as dlq
from services.core import streams
from services.core.bus import ACK_WAIT_S, MAX_DELIVER
from services.core.kernel_schema import MAX_SOURCE_CHARS
from services.core.retry import ELECTION_RETRY_S
from services.core.settings import Settings

# Mirrors of limits kept in modules this one must not import (the judge's pulls torch in; the profiler's is a
# service's own): tests/test_bus_limits.py holds each equal to its source.
# The judge's sandbox timeout on a CPU (services.judge.service.CPU_TIMEOUT_S; a GPU's is 300 s): the longer default.
JUDGE_TIMEOUT_S = 600.0
JUDGE_TIMEOUT_ENV = "YANTRA_JUDGE_TIMEOUT_S"
# The deadline of one profiler call to the server (services.profiler.adapters.CALL_TIMEOUT_S).
PROFILER_CALL_S = 600.0
PROFILER_CALL_ENV = "YANTRA_PROFILER_CALL_TIMEOUT_S"
# `Bus._dispatch` marks a handler's message in progress every third of the ack wait, and NAKs a failed one with a
# delay of 2 s a try, at most 10 s.
KEEPALIVES_PER_ACK_WAIT = 3
MAX_NAK_DELAY_S = 10.0

# Below this an ack wait is shorter than a busy service's event loop may stall (a model loading on 2 shared cores
# held it for over half a second): its in-progress marks, every third of it, come late, and work still being done
# is handed to another consumer, which does it again beside the first.
MIN_ACK_WAIT_S = 1.0
# nats-server's default max_payload: the most one message may carry, headers included.
NATS_DEFAULT_MAX_PAYLOAD = 1 << 20
# The most bytes of live values one profile carries (services.server.live_parameters.PROFILE_BUDGET_BYTES: the served
# model's own norm weights and rotary frequencies, the judge's `live-values` cases).
PROFILE_LIVE_BYTES = 320 << 10
# The largest event a service publishes: a CandidateProposed of MAX_SOURCE_CHARS characters of kernel source (a byte
# each in ASCII; a non-ASCII source past the log's limit is refused at publish, in one line, and ends its run) with its
# plan, contract and envelope, a few KB (the largest CandidateProposed of tests/tui/data/real_run.jsonl is 3.9 KB); or
# a ProfileCaptured of its live values and a few KB of shapes per class, whichever is larger.
LARGEST_EVENT_BYTES = max(MAX_SOURCE_CHARS, PROFILE_LIVE_BYTES) + (64 << 10)


def dead_letter_header_bytes() -> int:
    """The most a dead letter's headers take: a reason of MAX_REASON_CHARS four-byte characters, the longest run id's
    subject, every header set."""
    subject = "yantra.run." + "r" * 64 + ".CandidateProposed"
    headers = dlq.dead_letter_headers(
        "s" * 64, "\U0001f600" * dlq.MAX_REASON_CHARS, subject, stream="YANTRA_RUNS", seq=10**15, mine=True
    )
    headers |= {dlq.TRUNCATED: "1", dlq.ORIGINAL_SIZE: str(10**15), dlq.ORIGINAL_SHA256: "0" * 64}
    return dlq.headers_size(headers)


@dataclass(frozen=True)
class BusLimits:
    """The limits that must agree, as one process runs with them (`from_env`); the defaults are the code's."""

    dedup_window_s: float = streams.DEDUP_WINDOW_S
    ack_wait_s: float = ACK_WAIT_S
    keepalive_s: float | None = None  # None: the bus's, a third of the ack wait
    max_deliver: int = MAX_DELIVER
    max_nak_delay_s: float = MAX_NAK_DELAY_S
    judging_s: float = JUDGE_TIMEOUT_S
    profiler_call_s: float = PROFILER_CALL_S
    retry_s: float = ELECTION_RETRY_S
    runs_max_bytes: int = streams.RUNS_MAX_BYTES
    runs_max_msg_size: int = streams.RUNS_MAX_MSG_SIZE
    largest_event_bytes: int = LARGEST_EVENT_BYTES
    min_reserved_bytes: int = streams.MIN_RESERVED_BYTES
    dlq_max_bytes: int = streams.DLQ_MAX_BYTES
    dlq_max_age_s: float = streams.DLQ_MAX_AGE_S
    dlq_dedup_window_s: float = streams.DLQ_DEDUP_WINDOW_S
    dlq_copy_max_bytes: int = streams.DLQ_COPY_MAX_BYTES
    dlq_header_bytes: int = 0  # 0: dead_letter_header_bytes()
    nats_max_payload: int = NATS_DEFAULT_MAX_PAYLOAD

    @property
    def keepalive(self) -> float:
        return self.keepalive_s if self.keepalive_s is not None else self.ack_wait_s / KEEPALIVES_PER_ACK_WAIT

    @property
    def header_bytes(self) -> int:
        return self.dlq_header_bytes or dead_letter_header_bytes()

    @classmethod
    def from_env(cls, settings: Settings, env: Mapping[str, str]) -> BusLimits:
        """The limits a process with these settings and this environment runs with. A judge timeout or profiler
        deadline that is not a positive number reads as its default here: the judge and the profiler refuse it
        themselves, naming it."""
        # An election retry window unset is ELECTION_RETRY_S on a cluster (none on one server): the longer one.
        retry_s = settings.nats_retry_s if settings.nats_retry_s is not None else ELECTION_RETRY_S
        return cls(
            ack_wait_s=settings.ack_wait_s,
            retry_s=retry_s,
            judging_s=_seconds(env.get(JUDGE_TIMEOUT_ENV, ""), JUDGE_TIMEOUT_S),
            profiler_call_s=_seconds(env.get(PROFILER_CALL_ENV, ""), PROFILER_CALL_S),
        )


def _seconds(text: str, default: float) -> float:
    try:
        value = float(text)
    except ValueError:
        return default
    return value if value > 0 else default


def _s(seconds: float) -> str:
    return f"{seconds:,.4g} s" if seconds < 10_000 else f"{seconds:,.0f} s"


def _b(size: int) -> str:
    return f"{size:,} bytes"


def _longest(lim: BusLimits) -> str:
    if lim.judging_s >= lim.profiler_call_s:
        return f"the longest judging ({JUDGE_TIMEOUT_ENV}, {_s(lim.judging_s)})"
    return f"the longest profiler call ({PROFILER_CALL_ENV}, {_s(lim.profiler_call_s)})"


def _longest_s(lim: BusLimits) -> float:
    return max(lim.judging_s, lim.profiler_call_s)


# ------------------------------------------------------------------ the relations, each None when it holds


def _dedup_outlasts_a_redelivery(lim: BusLimits) -> str | None:
    # A handler's answers carry ids derived from their trigger (events.derived_event_id). When its in-progress marks
    # stop reaching the server (a connection blip, a stalled loop), the trigger goes to a second consumer one ack wait
    # later while the first still works: both publish the same answers, up to the longest handling plus that ack wait
    # apart, and only the dedup window drops the second copy.
    need = _longest_s(lim) + lim.ack_wait_s
    if lim.dedup_window_s > need:
        return None
    return (
        f"the dedup window (DEDUP_WINDOW_S, {_s(lim.dedup_window_s)}) must outlast {_longest(lim)} plus a redelivery "
        f"(the ack wait, YANTRA_ACK_WAIT_S, {_s(lim.ack_wait_s)}): an answer published again by a second delivery "
        "after it would be stored twice"
    )


def _dedup_outlasts_the_election_retry(lim: BusLimits) -> str | None:
    # A publish that meets a leader election is sent again with the same Nats-Msg-Id for up to the retry window
    # (services.core.retry); a try that landed before its answer was lost is dropped only inside the dedup window.
    if lim.dedup_window_s > lim.retry_s:
        return None
    return (
        f"the dedup window (DEDUP_WINDOW_S, {_s(lim.dedup_window_s)}) must outlast the election retry window "
        f"(YANTRA_NATS_RETRY_S, {_s(lim.retry_s)}): a publish retried after it would be stored twice"
    )


def _ack_wait_long_enough(lim: BusLimits) -> str | None:
    if lim.ack_wait_s >= MIN_ACK_WAIT_S:
        return None
    return (
        f"the ack wait (YANTRA_ACK_WAIT_S, {_s(lim.ack_wait_s)}) must be at least MIN_ACK_WAIT_S "
        f"({_s(MIN_ACK_WAIT_S)}): its in-progress marks come late from a busy service, and work still being done "
        "is handed out again"
    )


def _keepalive_within_ack_wait(lim: BusLimits) -> str | None:
    # A mark may come one period late (the loop busy) and still reset the ack timer in time only when two periods
    # fit in one ack wait.
    if lim.keepalive <= lim.ack_wait_s / 2:
        return None
    return (
        f"the in-progress keepalive period (Bus._dispatch's, {_s(lim.keepalive)}) must be at most half the ack wait "
        f"(YANTRA_ACK_WAIT_S, {_s(lim.ack_wait_s)}): one late mark and a handler's message is handed to another "
        "consumer mid-work"
    )


def _max_deliver_retries(lim: BusLimits) -> str | None:
    # A trigger failed MAX_DELIVER times ends its run (runner.give_up): one delivery would end a run on any
    # transient failure (the server restarting under the profiler, a NATS reconnect mid-publish).
    if lim.max_deliver >= 2:
        return None
    return (
        f"the deliveries of a message (MAX_DELIVER, {lim.max_deliver}) must be at least 2: a single failed delivery "
        "(a server restarting) would end its run"
    )


def _dlq_dedup_outlasts_the_deliveries(lim: BusLimits) -> str | None:
    # A message is dead-lettered on its last delivery, or at once when undecodable; a copy whose message could not be
    # terminated comes back and is copied again, up to MAX_DELIVER deliveries (each the longest handling, an ack wait
    # and a NAK's delay apart). Their copies share one id, dropped inside the DLQ's dedup window only.
    span = lim.max_deliver * (_longest_s(lim) + lim.ack_wait_s + lim.max_nak_delay_s)
    if lim.dlq_dedup_window_s > span:
        return None
    return (
        f"the dead letters' dedup window (DLQ_DEDUP_WINDOW_S, {_s(lim.dlq_dedup_window_s)}) must outlast every "
        f"delivery of one message (MAX_DELIVER {lim.max_deliver} x ({_longest(lim)} + the ack wait + a NAK delay), "
        f"{_s(span)}): a message copied again after it would be dead-lettered twice"
    )


def _dlq_age_holds_its_dedup(lim: BusLimits) -> str | None:
    # nats-server refuses a stream whose duplicate window is longer than its max age: no service could start.
    if lim.dlq_dedup_window_s <= lim.dlq_max_age_s:
        return None
    return (
        f"the dead letters' dedup window (DLQ_DEDUP_WINDOW_S, {_s(lim.dlq_dedup_window_s)}) must not outlast their "
        f"max age (DLQ_MAX_AGE_S, {_s(lim.dlq_max_age_s)}): nats-server refuses such a stream"
    )


def _log_takes_the_largest_event(lim: BusLimits) -> str | None:
    if lim.largest_event_bytes <= lim.runs_max_msg_size:
        return None
    return (
        f"the largest event (a CandidateProposed of MAX_SOURCE_CHARS source, {_b(lim.largest_event_bytes)}) must fit "
        f"the log's message limit (RUNS_MAX_MSG_SIZE, {_b(lim.runs_max_msg_size)}): a legit candidate would be refused"
    )


def _log_limit_above_the_reserve_floor(lim: BusLimits) -> str | None:
    # `streams._reserving` halves a max_bytes the disk cannot reserve down to MIN_RESERVED_BYTES: a limit under that
    # floor would be dropped (no limit) at the first refusal instead of halved.
    if lim.runs_max_bytes >= lim.min_reserved_bytes:
        return None
    return (
        f"the log's byte limit (RUNS_MAX_BYTES, {_b(lim.runs_max_bytes)}) must be at least the least a server is "
        f"asked to reserve (MIN_RESERVED_BYTES, {_b(lim.min_reserved_bytes)}): on a disk that cannot reserve it the "
        "log would keep no byte limit at all"
    )


def _dlq_copies_any_event_whole(lim: BusLimits) -> str | None:
    if lim.dlq_copy_max_bytes >= lim.runs_max_msg_size:
        return None
    return (
        f"a dead letter's copy (DLQ_COPY_MAX_BYTES, {_b(lim.dlq_copy_max_bytes)}) must hold any event the log takes "
        f"(RUNS_MAX_MSG_SIZE, {_b(lim.runs_max_msg_size)}): a dead-lettered event would lose its end"
    )


def _dead_letter_fits_a_message(lim: BusLimits) -> str | None:
    # nats-server closes the connection of a client that sends more than its max_payload (headers included): the
    # service that dead-lettered the largest event whole would go deaf.
    need = min(lim.dlq_copy_max_bytes, lim.runs_max_msg_size) + lim.header_bytes
    if need <= lim.nats_max_payload:
        return None
    return (
        f"the largest event the log takes (RUNS_MAX_MSG_SIZE, {_b(lim.runs_max_msg_size)}) with a dead letter's "
        f"headers ({_b(lim.header_bytes)}) must fit one NATS message (the server's default max_payload, "
        f"{_b(lim.nats_max_payload)}): its dead letter would be cut short"
    )


def _dlq_holds_a_dead_letter(lim: BusLimits) -> str | None:
    need = lim.dlq_copy_max_bytes + lim.header_bytes
    if lim.dlq_max_bytes >= need:
        return None
    return (
        f"the dead letters' byte limit (DLQ_MAX_BYTES, {_b(lim.dlq_max_bytes)}) must hold one whole dead letter "
        f"(DLQ_COPY_MAX_BYTES with its headers, {_b(need)}): the largest would be refused"
    )


RELATIONS: tuple[Callable[[BusLimits], str | None], ...] = (
    _dedup_outlasts_a_redelivery,
    _dedup_outlasts_the_election_retry,
    _ack_wait_long_enough,
    _keepalive_within_ack_wait,
    _max_deliver_retries,
    _dlq_dedup_outlasts_the_deliveries,
    _dlq_age_holds_its_dedup,
    _log_takes_the_largest_event,
    _log_limit_above_the_reserve_floor,
    _dlq_copies_any_event_whole,
    _dead_letter_fits_a_message,
    _dlq_holds_a_dead_letter,
)


def limit_problems(limits: BusLimits | None = None) -> list[str]:
    """Every relation `limits` (the code's defaults when None) break, one sentence each naming both limits."""
    limits = limits or BusLimits()
    return [problem for relation in RELATIONS if (problem := relation(limits))]
