"""Exported run logs: one JSON line per event, `{"seq": N, "envelope": base64(Envelope)}`."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from services.core import events as ev
from services.core.events import Recorded


def write_log(path: Path, log: list[Recorded]) -> None:
    with path.open("w") as f:
        for rec in log:
            f.write(json.dumps({"seq": rec.seq, "envelope": base64.b64encode(ev.encode(rec.env)).decode()}) + "\n")


def read_log(path: Path) -> list[Recorded]:
    """Read an exported log. Events of unknown types are kept (a newer writer); garbage lines raise ValueError."""
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            env = ev.Envelope()
            env.ParseFromString(base64.b64decode(item["envelope"]))
            out.append(Recorded(int(item["seq"]), env))
        except Exception as exc:
            raise ValueError(f"{path}:{n}: not an exported event ({exc})") from exc
    return out
