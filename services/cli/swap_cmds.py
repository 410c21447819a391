"""Swaps by hand: `yantra swaps` (the log's view, each kernel's lineage, the server's view), `yantra rollback SWAP`."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid

from services.cli.common import CliError, add_common, open_bus, settings_of
from services.core import events as ev
from services.core.describe import describe
from services.core.lineage import lineage
from services.core.pb import events_pb2 as pb
from services.core.server_client import ServerUnavailable, list_swaps
from services.core.stack import StackError, resolve_server_addr
from services.core.swaplog import find_swap, read_swap_events, swap_history
from services.server.routing import from_lanes


async def cmd_swaps(args) -> int:
    settings = settings_of(args)
    bus = await open_bus(settings)
    try:
        views = swap_history(*await read_swap_events(bus))
        logs = {run_id: await bus.read_run(run_id) for run_id in dict.fromkeys(v.run_id for v in views)}
    finally:
        await bus.close()
    try:
        records = {r.swap_id: r for r in await list_swaps(resolve_server_addr(settings), settings.admin_token)}
        server_note = ""
    except (ServerUnavailable, StackError) as exc:
        records, server_note = {}, f"(the server's own view is missing, and with it the live call counts: {exc})"
    if not views:
        print("no swaps yet: a run swaps a kernel when one is judged good enough (`yantra optimize`)")
    for v in views:
        msg = v.committed.msg
        logged = "live" if v.rolled_back is None else f"rolled back: {v.rolled_back.msg.reason}"
        if v.dropped:  # the log says live, but the last restart could not serve it
            logged += f" ({v.dropped} at the last restart)"
        target = msg.target_class.rsplit(".", 1)[-1]
        served = records.get(v.swap_id)
        origin = lineage(logs[v.run_id], msg)
        print(
            f"{v.swap_id}  {target:<16} {msg.modules_patched:>3} modules  run {v.run_id}  log: {logged}"
            f"  server: {served.state if served else '-'}  author: {origin.author}  verdict: {origin.verdict}"
            f"  calls: {served.calls if served else '-'}"
        )
        print(f"    serves: {serving_line(msg, served)}")
    if server_note:
        print(server_note)
    return 0


def serving_line(committed: pb.SwapCommitted, served) -> str:
    """Where a swap serves, lane by lane, as its SwapCommitted recorded it (services.server.routing), and how many live
    calls its plan left to the module's own forward when the server said."""
    plan = from_lanes(committed.serving)
    if plan is None:
        return "every call (committed before swaps were routed by lane)"
    own = f"; {served.own_calls} calls answered by the module's own forward" if served else ""
    return plan.describe(committed.observed.graphs) + own


async def cmd_rollback(args) -> int:
    bus = await open_bus(settings_of(args))
    try:
        view = find_swap(swap_history(*await read_swap_events(bus)), args.swap)
        if view is None:
            raise CliError(f"no swap {args.swap!r} in the log (see `yantra swaps`)")
        if view.rolled_back is not None:
            ended = view.rolled_back.msg.reason
            raise CliError(f"swap {args.swap} is already rolled back (run {view.run_id}): {ended}")
        request = pb.RollbackRequested(swap_id=args.swap, reason=f"operator: {args.reason}")
        env = ev.make_envelope(
            view.run_id,
            request,
            producer="cli",
            time_ns=time.time_ns(),
            causation_id=view.committed.env.event_id,
            event_id=str(uuid.uuid4()),
        )
        await bus.publish(env)
        print(f"asked the server to roll back {args.swap} (run {view.run_id})")
        try:
            async with asyncio.timeout(args.timeout):
                async with contextlib.aclosing(bus.tail(ev.run_filter(view.run_id))) as events:
                    async for answer in events:
                        if answer.env.causation_id == env.event_id:
                            break
        except TimeoutError:
            raise CliError(
                f"no answer within {args.timeout:.0f}s: is the server up (`yantra up`)? The request stays in the log "
                "and is answered when it is back"
            ) from None
    finally:
        await bus.close()
    print("  " + describe(answer))
    restored = answer.type == "SwapRolledBack" and not answer.msg.observed.error
    return 0 if restored else 1


def register(sub) -> None:
    sp = sub.add_parser(
        "swaps",
        help="every swap the log holds, live or rolled back: its author and verdict, the server's view, its live calls",
    )
    add_common(sp)
    sp.set_defaults(fn=cmd_swaps)

    sp = sub.add_parser("rollback", help="take a swapped kernel out of the live server (recorded in its run)")
    add_common(sp)
    sp.add_argument("swap", help="swap id (see `yantra swaps`)")
    sp.add_argument("--reason", default="asked from the command line", metavar="TEXT", help="why, recorded in the run")
    sp.add_argument(
        "--timeout",
        type=float,
        default=60,
        metavar="SECONDS",
        help="seconds to wait for the server's answer (default %(default)s)",
    )
    sp.set_defaults(fn=cmd_rollback)
