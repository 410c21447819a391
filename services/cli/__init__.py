"""`yantra`: start the stack, ask for runs, watch and replay them.

Each command lives in the module of its kind and registers its own arguments; this module
builds the parser and maps a `CliError` to one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from services.cli import log_cmds, run_cmds, stack_cmds, swap_cmds
from services.cli.common import CliError, add_common, settings_of
from services.registry import SERVICES


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="yantra",
        description="Make a live model faster while it serves: profile, write a Triton kernel, judge, hot-swap.",
        epilog="NATS_URL selects a NATS server; unset, `up`/`demo` start an embedded one under --data-dir.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (stack_cmds, run_cmds, log_cmds, swap_cmds):
        module.register(sub)

    sp = sub.add_parser("tui", help="watch runs live in a terminal UI, or replay one (--replay RUN|FILE)")
    add_common(sp)
    sp.add_argument("--replay", metavar="RUN|FILE", help="replay a run from the stream, or an exported log file")
    sp.set_defaults(fn=None)

    sp = sub.add_parser("serve", help="run one service in this process (what `up` starts for each)")
    sp.add_argument("name", choices=SERVICES)
    sp.set_defaults(fn=None)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    if args.command == "serve":
        import runpy

        sys.argv = [f"services.{args.name}"]
        try:
            runpy.run_module(f"services.{args.name}", run_name="__main__")
        except SystemExit as exc:
            return int(exc.code or 0)
        return 0
    if args.command == "tui":
        from tui.app import main as tui_main  # Textual starts its own event loop

        return tui_main(args.replay, settings_of(args))
    try:
        return asyncio.run(args.fn(args))
    except CliError as exc:
        print(f"yantra {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
