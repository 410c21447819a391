"""Reading the log: `yantra replay`, `yantra runs`, `yantra events`.

What a run holds came from outside (a model name, a reason, model text): each line goes out through
`output.sanitize`, so none of it acts on the terminal it is printed to.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from nats.errors import Error as NatsError

from services.cli.common import CliError, add_common, open_bus, run_id_arg, settings_of
from services.cli.output import sanitize
from services.core import events as ev
from services.core import run_end, served_text
from services.core.bus import Bus, Undecodable
from services.core.describe import describe
from services.core.logfile import write_log
from services.core.settings import Settings
from services.core.stack import StackError, resolve_nats_url

# ------------------------------------------------------------------ reading


async def cmd_replay(args) -> int:
    from services.core.replay import verify
    from services.registry import rederivers

    settings = settings_of(args)
    bus = await open_bus(settings)
    try:
        log = await bus.read_run(args.run)
    finally:
        await bus.close()
    if not log:
        raise CliError(f"no run {args.run!r} in the log (see `yantra runs`)")
    for rec in log:
        print(sanitize(describe(rec)))
    if args.export:
        write_log(Path(args.export), log)
        print(f"exported {len(log)} events to {args.export}")
    if not args.verify:
        return 0
    mismatches = verify(log, rederivers())
    if mismatches:
        print(f"replay differs in {len(mismatches)} of {len(log)} events:")
        for m in mismatches:
            print(sanitize(f"  {m}"))
        return 1
    print(f"replay verified: all {len(log)} events re-derived byte for byte")
    return 0


async def cmd_runs(args) -> int:
    bus = await open_bus(settings_of(args))
    try:
        run_ids = await bus.run_ids()
        for run_id in run_ids:
            log = await bus.read_run(run_id)
            state = run_end.state(log)
            print(sanitize(f"{run_id}  {ev.first(log, 'RunRequested').msg.model:<22} {state}"))
            completed = ev.first(log, "RunCompleted")
            for line in served_text.run_lines(completed.msg) if completed else []:
                print(sanitize(f"    {line}"))
        if not run_ids:
            print("no runs yet: `yantra optimize` starts one")
        dead = await bus.dead_letter_count()
        if dead:
            print(f"{dead} dead-lettered message{'s' * (dead != 1)}: see `yantra dlq`")
    finally:
        await bus.close()
    return 0


async def cmd_events(args) -> int:
    settings = settings_of(args)
    subject = ev.run_filter(args.run or "*", args.type or ">")
    if args.follow:
        await follow_events(settings, subject, run=args.run)
        return 0
    bus = await open_bus(settings)
    try:
        entries = await bus.read_all(subject, include_bad=True)
        if not entries and args.run and not await run_exists(bus, args.run):
            raise CliError(f"no run {args.run!r} in the log (see `yantra runs`)")
    finally:
        await bus.close()
    for entry in entries:
        print(event_line(entry), flush=True)
    return 0


async def run_exists(bus: Bus, run_id: str) -> bool:
    """Whether the run log holds anything of `run_id` (one stream info, however long the run)."""
    info = await bus.js.stream_info(ev.RUNS_STREAM, subjects_filter=ev.run_filter(run_id))
    return bool(info.state.subjects)


def event_line(entry: ev.Recorded | Undecodable) -> str:
    """An event as `describe` puts it, or a message on a run subject that is no event, and why; its control
    characters escaped (run names, reasons and model text come from outside: `output.sanitize`)."""
    if isinstance(entry, Undecodable):
        run_id = entry.subject.split(".")[2] if entry.subject.count(".") >= 3 else "?"
        return sanitize(f"{run_id}  seq {entry.seq} on {entry.subject}: undecodable: {entry.reason}")
    return sanitize(f"{entry.env.run_id}  {describe(entry)}")


# ------------------------------------------------------------------ following across restarts

FOLLOW_POLL_S = 0.5  # how often a follower looks at its connection (and, while it is down, at stack.json)
RECONNECT_MAX_S = 5.0  # the longest wait between two attempts to connect again


@dataclass
class _Printed:
    last_seq: int = 0  # the last stream sequence printed: a new connection resumes after it


def _where(url: str) -> str:
    """host:port of a NATS URL: what a notice names (a URL may carry credentials)."""
    return urlsplit(url).netloc.rpartition("@")[2] or url


def _stack_url(settings: Settings) -> str | None:
    """The NATS URL the stack has now (NATS_URL, or stack.json's); None while no stack runs."""
    try:
        return resolve_nats_url(settings)
    except StackError:
        return None


def _notice(text: str) -> None:
    print(f"yantra events: {text}", file=sys.stderr, flush=True)


def _print_line(line: str) -> None:
    print(line, flush=True)


async def follow_events(
    settings: Settings,
    subject: str,
    *,
    run: str | None = None,
    out: Callable[[str], None] = _print_line,
    notice: Callable[[str], None] = _notice,
    poll_s: float = FOLLOW_POLL_S,
) -> None:
    """Print every event on `subject`, then each new one, until cancelled (Ctrl-C).

    A lost connection is waited out, as the TUI waits: the client reconnects by itself to the same URL (a
    nats-server restarted on its port, as `yantra up` restarts it), and when the stack comes back on another
    URL (a new `yantra up`, whose stack.json names it), the old connection is dropped and one made to the new
    URL. Either way printing resumes after the last stream sequence printed: nothing skipped, nothing twice.
    A one-line notice on stderr says when the connection goes and when it is back.
    """
    url = _stack_url(settings)
    bus = await open_bus(settings)  # the first connection must work: CliError says why it does not
    if run and not await run_exists(bus, run):
        await bus.close()
        raise CliError(f"no run {run!r} in the log (see `yantra runs`)")
    printed = _Printed()
    while True:
        why = await _follow_connection(bus, url or "", settings, subject, printed, out, notice, poll_s)
        bus, url = await _connect_again(settings, why, notice, poll_s)
        notice(f"following again on NATS at {_where(url)}, after seq {printed.last_seq}")


async def _follow_connection(bus, url, settings, subject, printed, out, notice, poll_s) -> str:
    """Print from `bus` until its connection closes or the stack's NATS moves; close it and return which."""
    printing = asyncio.create_task(_print_tail(bus, subject, printed, out))
    watching = asyncio.create_task(_watch(bus, url, settings, notice, poll_s))
    try:
        await asyncio.wait([printing, watching], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (printing, watching):
            task.cancel()
        for task in (printing, watching):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        with contextlib.suppress(Exception):  # close, not drain: a connection that is down would wait out a timeout
            await bus.nc.close()
    if watching.done() and not watching.cancelled():
        return watching.result()  # or what the watch raised
    exc = printing.exception() if printing.done() and not printing.cancelled() else None
    # The tail raises once its connection is closed; anything else (the reader gone: BrokenPipeError, which
    # `output.run` handles, or a bug) is not a connection to make again.
    if isinstance(exc, BrokenPipeError) or not isinstance(exc, NatsError | TimeoutError | ConnectionError):
        raise exc or RuntimeError("the event tail ended")
    return f"the connection to NATS at {_where(url)} closed ({type(exc).__name__})"


async def _print_tail(bus: Bus, subject: str, printed: _Printed, out: Callable[[str], None]) -> None:
    async with contextlib.aclosing(bus.tail(subject, start_seq=printed.last_seq + 1, include_bad=True)) as events:
        async for entry in events:
            out(event_line(entry))
            printed.last_seq = entry.seq


async def _watch(bus: Bus, url: str, settings: Settings, notice: Callable[[str], None], poll_s: float) -> str:
    """Return why `bus`'s connection must be made again: it closed, or the stack's NATS is now elsewhere.
    While it is down (the client retrying its URL), say so once, and once more when it is back."""
    down = False
    while True:
        await asyncio.sleep(poll_s)
        nc = bus.nc
        if nc.is_closed:
            return f"the connection to NATS at {_where(url)} closed"
        if nc.is_connected:
            if down:
                notice(f"following again on NATS at {_where(url)}")
                down = False
            continue
        if not down:
            notice(f"lost the connection to NATS at {_where(url)}; waiting for it to come back")
            down = True
        now = _stack_url(settings)
        if now is not None and now != url:
            return f"the stack's NATS is now at {_where(now)}"


async def _connect_again(settings: Settings, why: str, notice: Callable[[str], None], poll_s: float):
    """A new connection to wherever the stack's NATS is now, waiting as long as that takes; (bus, url)."""
    attempt = 0
    while True:
        url = _stack_url(settings)
        if url is not None:
            try:
                return await open_bus(settings), url
            except CliError as exc:
                why = str(exc)
        attempt += 1
        if attempt == 1:
            notice(f"{why}; waiting for the stack's NATS")
        await asyncio.sleep(min(poll_s * 2**attempt, RECONNECT_MAX_S))


def register(sub) -> None:
    sp = sub.add_parser("replay", help="print a run's log; --verify re-derives every event and compares bytes")
    add_common(sp)
    sp.add_argument("run", type=run_id_arg, help="run id (see `yantra runs`)")
    sp.add_argument("--verify", action="store_true", help="re-derive every decision and report any difference")
    sp.add_argument("--export", metavar="FILE", help="also write the log to FILE (JSON lines)")
    sp.set_defaults(fn=cmd_replay)

    sp = sub.add_parser("runs", help="list runs and their outcomes")
    add_common(sp)
    sp.set_defaults(fn=cmd_runs)

    sp = sub.add_parser("events", help="print events of all runs (or one); --follow keeps tailing")
    add_common(sp)
    sp.add_argument("--run", type=run_id_arg, metavar="RUN", help="only this run (see `yantra runs`)")
    sp.add_argument("--type", choices=ev.RUN_EVENT_NAMES, metavar="TYPE", help="only this event type: %(choices)s")
    sp.add_argument("--follow", "-f", action="store_true", help="keep printing new events")
    sp.set_defaults(fn=cmd_events)
