"""Dead letters: `yantra dlq` lists what no service could handle, `yantra dlq show SEQ` shows one in full."""

from __future__ import annotations

import argparse

from services.cli.common import CliError, add_common, open_bus, settings_of
from services.core import events as ev
from services.core.bus import DeadLetter
from services.core.describe import describe

REASON_CHARS = 60
PREVIEW_BYTES = 256


def _when(d: DeadLetter) -> str:
    return d.time.strftime("%Y-%m-%d %H:%M:%S") if d.time else "?"


def _origin(d: DeadLetter) -> str:
    where = d.original_subject or "?"
    return f"{where} #{d.original_seq}" if d.original_seq else where


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def line(d: DeadLetter) -> str:
    """One dead letter on one line: its DLQ sequence, when, which service, where it came from, why."""
    cut = f" [copy truncated: {d.original_size:,} bytes]" if d.truncated else ""
    return f"{d.seq:>6}  {_when(d)}  {d.service:<10}  {_origin(d)}  {_short(d.reason, REASON_CHARS)}{cut}"


def payload_lines(data: bytes, original_seq: int, original_size: int = 0) -> list[str]:
    """The payload as the event it is, or, when it is none, why not and a hex and printable preview.

    `original_size`: the payload is the first bytes of a message of that size (a truncated dead letter), which
    no decoder can read back; its preview is all there is.
    """
    if original_size:
        out = [f"payload (the first {len(data):,} of {original_size:,} bytes): truncated, so not decoded"]
        return out + _preview(data)
    try:
        env = ev.decode(data)
    except ev.BadEvent as exc:
        why = str(exc)
    else:
        rec = ev.Recorded(original_seq, env)
        return [f"payload ({len(data)} bytes): an Envelope", f"  {env.run_id}  {describe(rec)}"]
    return [f"payload ({len(data)} bytes): not an event ({_short(why, 200)})", *_preview(data)]


def _preview(data: bytes) -> list[str]:
    out = []
    head = data[:PREVIEW_BYTES]
    for offset in range(0, len(head), 16):
        chunk = head[offset : offset + 16]
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        out.append(f"  {offset:04x}  {chunk.hex(' '):<47}  {text}")
    if len(data) > PREVIEW_BYTES:
        out.append(f"  … {len(data) - PREVIEW_BYTES} more bytes")
    return out


def show(d: DeadLetter) -> list[str]:
    out = [
        f"dead letter {d.seq} ({ev.DLQ_STREAM}, {d.subject}), {_when(d)} UTC",
        f"service: {d.service}",
        f"from:    {_origin(d)}" + (f" in {d.headers['Yantra-Stream']}" if d.headers.get("Yantra-Stream") else ""),
        f"reason:  {d.reason}",
    ]
    if d.truncated:
        out.append(
            f"copy:    truncated: the first {len(d.data):,} of the original's {d.original_size:,} bytes"
            f" (too large to copy whole); the original's sha256 {d.original_sha256 or '?'}"
        )
    out += ["headers:", *(f"  {k}: {v}" for k, v in sorted(d.headers.items()))]
    return out + payload_lines(d.data, d.original_seq, d.original_size if d.truncated else 0)


def _service(text: str) -> str:
    try:
        return ev.check_run_id(text)  # a subject token, as a run id is
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a service name") from None


def _seq(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a sequence number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a sequence number (they start at 1)")
    return value


async def cmd_dlq(args) -> int:
    if args.action == "show" and args.seq is None:
        raise CliError("`yantra dlq show` needs the SEQ of a dead letter (the first column of `yantra dlq`)")
    if args.action == "list" and args.seq is not None:
        raise CliError(f"`yantra dlq list` takes no SEQ; `yantra dlq show {args.seq}` shows that one")
    bus = await open_bus(settings_of(args))
    try:
        if args.action == "show":
            letter = await bus.get_dead_letter(args.seq)
            if letter is None:
                raise CliError(f"no dead letter {args.seq} (see `yantra dlq`; they go after 14 days or 10,000 more)")
            print("\n".join(show(letter)))
            return 0
        letters = await bus.dead_letters(args.service or "*")
    finally:
        await bus.close()
    if not letters:
        print("no dead-lettered messages")
        return 0
    shown = letters[-args.last :] if args.last else letters
    for letter in shown:
        print(line(letter))
    more = f", the last {len(shown)} shown" if len(shown) < len(letters) else ""
    print(f"{len(letters)} dead-lettered message{'s' * (len(letters) != 1)}{more}; `yantra dlq show SEQ` for one")
    return 0


def register(sub) -> None:
    sp = sub.add_parser("dlq", help="list dead-lettered messages (what no service could handle), or show one")
    add_common(sp)
    sp.add_argument(
        "action", nargs="?", choices=["list", "show"], default="list", help="list them (default) or show one"
    )
    sp.add_argument("seq", nargs="?", type=_seq, help="with show: the dead letter's sequence (first column of list)")
    sp.add_argument("--service", type=_service, help="list only this service's dead letters (judge, coder, ...)")
    sp.add_argument("--last", type=_seq, metavar="N", help="list only the last N")
    sp.set_defaults(fn=cmd_dlq)
