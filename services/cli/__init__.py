"""`yantra`: start the stack, ask for runs, watch and replay them.

Each command lives in the module of its kind and registers its own arguments; this module
builds the parser and maps a `CliError` (and what NATS, JetStream or the disk answer) to one line on stderr
and exit code 2.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from nats.errors import Error as NatsError

from services.cli import dlq_cmds, log_cmds, output, run_cmds, stack_cmds, swap_cmds
from services.cli.common import CliError, add_common, check_credential, nats_problem, settings_of
from services.core.bus import BusUnavailable, EventRefused
from services.core.nats_security import quiet_tls_eof_warning
from services.registry import SERVICES

PACKAGE = "gpuyantra"


def version() -> str:
    """The installed package's version; from pyproject.toml when running from a checkout that is not installed."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed(PACKAGE)
    except PackageNotFoundError:
        pass
    import tomllib
    from pathlib import Path

    try:
        with open(Path(__file__).resolve().parents[2] / "pyproject.toml", "rb") as f:
            return str(tomllib.load(f)["project"]["version"]) + " (not installed)"
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return "unknown (not installed)"


class _Version(argparse.Action):
    """`--version`: looked up only when asked, so other commands do not pay for reading the metadata."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{parser.prog} {version()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="yantra",
        description="Make a live model faster while it serves: profile, write a Triton kernel, judge, hot-swap.",
        epilog="NATS_URL selects a NATS server; unset, `up`/`demo` start an embedded one under --data-dir.",
    )
    p.add_argument("--version", action=_Version, help="print the installed version and exit")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (stack_cmds, run_cmds, log_cmds, dlq_cmds, swap_cmds):
        module.register(sub)

    sp = sub.add_parser("tui", help="watch runs live in a terminal UI, or replay one (--replay RUN|FILE)")
    add_common(sp)
    sp.add_argument("--replay", metavar="RUN|FILE", help="replay a run from the stream, or an exported log file")
    sp.set_defaults(fn=None)

    sp = sub.add_parser("serve", help="run one service in this process (what `up` starts for each)")
    sp.add_argument("name", choices=SERVICES, metavar="NAME", help="the service to run: %(choices)s")
    sp.set_defaults(fn=None)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    quiet_tls_eof_warning()
    if args.command == "serve":
        import runpy

        sys.argv = [f"services.{args.name}"]
        try:
            runpy.run_module(f"services.{args.name}", run_name="__main__")
        except SystemExit as exc:
            return int(exc.code or 0)
        return 0
    try:
        if args.command == "tui":
            from tui.app import main as tui_main  # Textual starts its own event loop

            settings = settings_of(args)
            if args.replay is None or not Path(args.replay).is_file():  # it will read from NATS: may it?
                asyncio.run(check_credential(settings))
            return tui_main(args.replay, settings)
        # sanitised output; a reader that closed the pipe (`yantra events | head`) ends it quietly (141)
        return output.run(lambda: asyncio.run(args.fn(args)))
    except (CliError, EventRefused, BusUnavailable) as exc:  # EventRefused: the run log is full or the event too large
        print(f"yantra {args.command}: {exc}", file=sys.stderr)
        return 2
    except NatsError as exc:  # JetStream turned off by a full disk, say, in the middle of any command
        print(f"yantra {args.command}: {nats_problem(exc)}", file=sys.stderr)
        return 2
    except OSError as exc:  # a file the command writes (--report, --export) on a full or read-only disk
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"yantra {args.command}: {exc.strerror or str(exc) or type(exc).__name__}{where}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
