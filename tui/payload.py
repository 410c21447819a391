"""An event's payload as readable text: nested fields indented, multi-line strings (kernel source) as blocks."""

from __future__ import annotations

from google.protobuf.json_format import MessageToDict

from services.core.events import Recorded

INLINE_LIST = 80  # a list of scalars this short stays on one line
# A single-line string past this (the base64 of a profile's live tensors: up to 192 KiB a class) shows its start and
# its length, not a screen of characters.
LONG_LINE = 240


def _scalar(value) -> str:
    if isinstance(value, str):
        if len(value) > LONG_LINE:
            return f"{value[:48]}… ({len(value):,} characters)"
        return repr(value) if value == "" or value.strip() != value else value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _lines(key: str, value, indent: int) -> list[str]:
    pad = "  " * indent
    if isinstance(value, dict):
        out = [f"{pad}{key}:"]
        for k, v in value.items():
            out += _lines(k, v, indent + 1)
        return out
    if isinstance(value, list):
        if all(not isinstance(v, dict | list) for v in value):
            inline = "[" + ", ".join(_scalar(v) for v in value) + "]"
            if len(inline) <= INLINE_LIST:
                return [f"{pad}{key}: {inline}"]
        out = [f"{pad}{key}:"]
        for v in value:
            sub = _lines("-", v, indent + 1)
            out += sub
        return out
    if isinstance(value, str) and "\n" in value:
        return [f"{pad}{key}: |"] + [f"{pad}  {line}" for line in value.splitlines()]
    return [f"{pad}{key}: {_scalar(value)}"]


def header_lines(rec: Recorded) -> list[str]:
    env = rec.env
    return [
        f"type: {env.type}",
        f"seq: {rec.seq}",
        f"event_id: {env.event_id}",
        f"run_id: {env.run_id}",
        f"producer: {env.producer}",
        f"causation_id: {env.causation_id or '-'}",
        f"time_unix_ns: {env.time_unix_ns}",
        f"schema_version: {env.schema_version}",
    ]


def payload_lines(rec: Recorded, known: bool) -> list[str]:
    if not known:
        raw = rec.env.payload
        hexed = raw[:64].hex(" ")
        return [
            f"payload: {len(raw)} bytes; type {rec.type!r} is unknown to this TUI",
            "  (a newer writer? shown, not interpreted)",
            f"  {hexed}{' …' if len(raw) > 64 else ''}",
        ]
    data = MessageToDict(rec.msg, preserving_proto_field_name=True)
    out = ["payload:"]
    for k, v in data.items():
        out += _lines(k, v, 1)
    return out
