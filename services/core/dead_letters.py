"""Dead letters: the YANTRA_DLQ entry, the headers that say where it came from and why, and reading them."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from services.core import events as ev
from services.core.stream_read import read_msgs
from services.core.streams import DLQ_COPY_MAX_BYTES

MAX_REASON_CHARS = 4000
# The headers of a dead letter that holds only the first bytes of its original (`fit_copy`).
TRUNCATED = "Yantra-Truncated"
ORIGINAL_SIZE = "Yantra-Original-Size"
ORIGINAL_SHA256 = "Yantra-Original-Sha256"
# nats-py frames headers as "NATS/1.0\r\n", a "name: value\r\n" line each, then "\r\n": 12 bytes, with room to spare.
_HEADER_FRAME = 64


@dataclass(frozen=True)
class DeadLetter:
    """An entry of YANTRA_DLQ: the original bytes, and where they came from and why in its headers."""

    seq: int
    time: datetime
    subject: str
    headers: dict[str, str]
    data: bytes

    @property
    def reason(self) -> str:
        return self.headers.get("Yantra-Reason", "")

    @property
    def service(self) -> str:
        return self.headers.get("Yantra-Service") or self.subject.removeprefix("yantra.dlq.")

    @property
    def original_subject(self) -> str:
        return self.headers.get("Yantra-Subject", "")

    @property
    def original_seq(self) -> int:
        return _int(self.headers.get("Yantra-Seq", "0"))

    @property
    def truncated(self) -> bool:
        """Whether this holds only the first bytes of the original (it was too large to copy whole)."""
        return self.headers.get(TRUNCATED) == "1"

    @property
    def original_size(self) -> int:
        """The original's size in bytes: the copy's own, unless it was truncated."""
        return _int(self.headers.get(ORIGINAL_SIZE, "0")) if self.truncated else len(self.data)

    @property
    def original_sha256(self) -> str:
        return self.headers.get(ORIGINAL_SHA256, "") if self.truncated else hashlib.sha256(self.data).hexdigest()


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0


def dlq_msg_id(stream: str, seq: int, service: str = "") -> str:
    """The dead letter's id: one per stored message (undecodable for everyone), or per service and message
    (its handler failed); the DLQ drops a second copy with the same id."""
    return f"dlq-{stream}-{seq}" + (f"-{service}" if service else "")


def _header(value: str) -> str:
    """A header value on one line (NATS headers are lines)."""
    return " ".join(value.split())


def dead_letter_headers(
    service: str, reason: str, subject: str, *, stream: str = "", seq: int = 0, mine: bool = True
) -> dict[str, str]:
    """Why and where from, as the dead letter's headers (see `Bus.dead_letter`); with a stream sequence,
    the Nats-Msg-Id that stores it once (`dlq_msg_id`)."""
    headers = {
        "Yantra-Reason": _header(reason)[:MAX_REASON_CHARS],
        "Yantra-Subject": subject,
        "Yantra-Service": service,
        "Yantra-Time": datetime.now(UTC).isoformat(timespec="milliseconds"),
    }
    if seq:
        headers |= {"Yantra-Stream": stream, "Yantra-Seq": str(seq)}
        headers["Nats-Msg-Id"] = dlq_msg_id(stream, seq, service if mine else "")
    return headers


def headers_size(headers: dict[str, str]) -> int:
    """What `headers` take of a NATS message (at most): the server bounds headers and payload together."""
    return _HEADER_FRAME + sum(len(k.encode()) + len(v.encode()) + 4 for k, v in headers.items())


def fit_copy(
    data: bytes, headers: dict[str, str], max_payload: int, cap: int = DLQ_COPY_MAX_BYTES
) -> tuple[bytes, dict[str, str]]:
    """The dead letter's payload and headers: the message whole when it is at most `cap` bytes and fits with its
    headers in one NATS message (`max_payload`, the server's); else its first bytes that do, the headers saying so
    (`Yantra-Truncated: 1`) with the original's size and sha256.

    A copy over the server's max_payload is not refused: the server closes the connection that sent it, and the
    service that tried went deaf while its message came back to the next one, for ever.
    """
    if len(data) <= cap and len(data) + headers_size(headers) <= max_payload:
        return data, headers
    marked = headers | {
        TRUNCATED: "1",
        ORIGINAL_SIZE: str(len(data)),
        ORIGINAL_SHA256: hashlib.sha256(data).hexdigest(),
    }
    keep = max(0, min(cap, max_payload - headers_size(marked)))
    return data[:keep], marked


async def list_dead_letters(js: JetStreamContext, service: str = "*") -> list[DeadLetter]:
    """Every entry of the DLQ (of one service, or all), oldest first."""
    try:
        msgs = await read_msgs(js, ev.DLQ_STREAM, ev.dlq_subject(service))
    except NotFoundError:
        return []
    return [
        DeadLetter(m.metadata.sequence.stream, m.metadata.timestamp, m.subject, dict(m.headers or {}), m.data)
        for m in msgs
    ]


async def get_dead_letter(js: JetStreamContext, seq: int) -> DeadLetter | None:
    """The DLQ entry with this sequence, or None when there is none (never was, or aged out)."""
    try:
        m = await js.get_msg(ev.DLQ_STREAM, seq)
    except NotFoundError:
        return None
    return DeadLetter(m.seq or seq, m.time, m.subject or "", dict(m.headers or {}), m.data or b"")


async def count_dead_letters(js: JetStreamContext) -> int:
    try:
        return (await js.stream_info(ev.DLQ_STREAM)).state.messages
    except NotFoundError:
        return 0
