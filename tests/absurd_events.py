"""Events of every type whose fields hold absurd values: what a buggy or hostile producer could put in the log.

The type is valid and the payload parses, so every consumer and reader takes them as events; readers of the log
(`yantra runs`, `events`, `replay`, the TUI) must show them, not crash on them.
"""

from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor as FD
from google.protobuf.message import Message

from services.core import events as ev

MODES = ("empty", "huge", "nan", "inf", "negative")
_STRINGS = {"empty": "", "huge": "x" * 5000, "nan": "\n\x1b[31m%s{}\u202e", "inf": "[bold]x[/]", "negative": "-1"}
_FLOATS = {"empty": 0.0, "huge": 1e308, "nan": float("nan"), "inf": float("inf"), "negative": float("-inf")}
_SIGNED = (FD.TYPE_INT32, FD.TYPE_INT64, FD.TYPE_SINT32, FD.TYPE_SINT64, FD.TYPE_SFIXED32, FD.TYPE_SFIXED64)
_WIDE = (FD.TYPE_INT64, FD.TYPE_UINT64, FD.TYPE_SINT64, FD.TYPE_FIXED64, FD.TYPE_SFIXED64)


def _scalar(field, mode: str):
    kind = field.type
    if kind == FD.TYPE_STRING:
        return _STRINGS[mode]
    if kind == FD.TYPE_BYTES:
        return b"\x00\xff" * (2000 if mode == "huge" else 1)
    if kind == FD.TYPE_BOOL:
        return mode != "empty"
    if kind == FD.TYPE_ENUM:
        return 0
    if kind == FD.TYPE_FLOAT:
        return 3e38 if mode == "huge" else _FLOATS[mode]
    if kind == FD.TYPE_DOUBLE:
        return _FLOATS[mode]
    bits = 64 if kind in _WIDE else 32
    signed = kind in _SIGNED
    if mode == "empty":
        return 0
    if mode in ("huge", "inf"):
        return (1 << (bits - 1)) - 1 if signed else (1 << bits) - 1
    return -(1 << (bits - 1)) if signed else 0


def fill(msg: Message, mode: str, depth: int = 0) -> Message:
    """Every field of `msg` (nested messages too, repeated fields twice) set to the mode's absurd value."""
    for field in msg.DESCRIPTOR.fields:
        value = getattr(msg, field.name)
        repeated = hasattr(value, "extend")
        if field.type == FD.TYPE_MESSAGE:
            if field.message_type.GetOptions().map_entry or depth > 4:
                continue
            for _ in range(2 if repeated else 1):
                fill(value.add() if repeated else value, mode, depth + 1)
        elif repeated:
            value.extend([_scalar(field, mode)] * 2)
        else:
            setattr(msg, field.name, _scalar(field, mode))
    return msg


def absurd_log(run_id: str, mode: str, with_metrics: bool = False) -> list[ev.Recorded]:
    """One event of every run type (and three ServerMetrics), each caused by the one before, all absurd."""
    names = ev.RUN_EVENT_NAMES + (ev.METRIC_EVENT_NAMES * 3 if with_metrics else ())
    log: list[ev.Recorded] = []
    for i, name in enumerate(names):
        time_ns = {"empty": 0, "huge": (1 << 63) - 1 - i, "nan": -(1 << 63) + i, "inf": (1 << 63) - 1, "negative": -i}
        env = ev.make_envelope(
            run_id,
            fill(ev.EVENT_TYPES[name](), mode),
            producer="p" * (3000 if mode == "huge" else 1),
            time_ns=time_ns[mode],
            causation_id=log[-1].env.event_id if log else "",
        )
        log.append(ev.Recorded(i + 1, env))
    return log
