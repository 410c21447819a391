"""Reading the log: `yantra replay`, `yantra runs`, `yantra events`."""

from __future__ import annotations

import contextlib
from pathlib import Path

from services.cli.common import CliError, add_common, open_bus, run_id_arg, settings_of
from services.core import events as ev
from services.core import run_end
from services.core.bus import Undecodable
from services.core.describe import describe
from services.core.logfile import write_log

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
        print(describe(rec))
    if args.export:
        write_log(Path(args.export), log)
        print(f"exported {len(log)} events to {args.export}")
    if not args.verify:
        return 0
    mismatches = verify(log, rederivers())
    if mismatches:
        print(f"replay differs in {len(mismatches)} of {len(log)} events:")
        for m in mismatches:
            print(f"  {m}")
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
            print(f"{run_id}  {ev.first(log, 'RunRequested').msg.model:<22} {state}")
        if not run_ids:
            print("no runs yet: `yantra optimize` starts one")
        dead = await bus.dead_letter_count()
        if dead:
            print(f"{dead} dead-lettered message{'s' * (dead != 1)}: see `yantra dlq`")
    finally:
        await bus.close()
    return 0


async def cmd_events(args) -> int:
    bus = await open_bus(settings_of(args))
    subject = ev.run_filter(args.run or "*", args.type or ">")
    try:
        if not args.follow:
            for entry in await bus.read_all(subject, include_bad=True):
                print(event_line(entry), flush=True)
            return 0
        async with contextlib.aclosing(bus.tail(subject, include_bad=True)) as events:
            async for entry in events:
                print(event_line(entry), flush=True)
    finally:
        await bus.close()
    return 0


def event_line(entry: ev.Recorded | Undecodable) -> str:
    """An event as `describe` puts it, or a message on a run subject that is no event, and why."""
    if isinstance(entry, Undecodable):
        run_id = entry.subject.split(".")[2] if entry.subject.count(".") >= 3 else "?"
        return f"{run_id}  seq {entry.seq} on {entry.subject}: undecodable: {entry.reason}"
    return f"{entry.env.run_id}  {describe(entry)}"


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
