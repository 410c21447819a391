"""What every `yantra` command shares: the one-line error, settings, the bus, argument types."""

from __future__ import annotations

import argparse

from pydantic import ValidationError

from services.core import events as ev
from services.core.bus import Bus, BusUnavailable
from services.core.settings import Settings
from services.core.stack import StackError, check_data_dir, resolve_nats_url
from services.server.models import PRESETS  # names only: torch loads when a model does


class CliError(RuntimeError):
    """An error the user can act on: printed as one line, exit code 2."""


def settings_of(args: argparse.Namespace) -> Settings:
    """The settings a command runs with (environment, then its options); CliError when they cannot work,
    so a data dir that is a file, say, is one line for every command rather than a traceback in each."""
    try:
        settings = Settings.from_env(
            data_dir=getattr(args, "data_dir", None),
            model=getattr(args, "model", None),
            device=getattr(args, "device", None),
            graphs=False if getattr(args, "no_graphs", False) else None,
            batch=getattr(args, "batch", None),
        )
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg']}" for e in exc.errors())
        raise CliError(f"invalid settings: {problems}") from None
    try:
        check_data_dir(settings.data_dir)
    except StackError as exc:
        raise CliError(str(exc)) from None
    return settings


async def open_bus(settings: Settings) -> Bus:
    try:
        return await Bus.connect(resolve_nats_url(settings), name="yantra-cli", timeout=3.0)
    except (StackError, BusUnavailable) as exc:
        raise CliError(f"{exc}. Start the stack with `yantra up` or set NATS_URL.") from exc


def run_id_arg(text: str) -> str:
    try:
        return ev.check_run_id(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def bounded(low: int, high: int):
    """An argparse type: an integer in [low, high] (the server refuses others, which would stall a run)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is outside {low}..{high}")
        return value

    return parse


def add_common(sp: argparse.ArgumentParser, model: bool = False) -> None:
    sp.add_argument(
        "--data-dir",
        metavar="DIR",
        help="where the embedded stack keeps its state (default .yantra, or YANTRA_DATA_DIR)",
    )
    if model:
        sp.add_argument(
            "--model",
            metavar="NAME",
            help=f"preset ({', '.join(PRESETS)}; random weights), local path or hub id"
            " (default tiny-qwen2, or YANTRA_MODEL)",
        )
        sp.add_argument(
            "--device",
            choices=["auto", "cpu", "cuda"],
            help="serving device (default auto: cuda when a GPU is visible)",
        )
        sp.add_argument(
            "--no-graphs",
            action="store_true",
            help="decode steps run eagerly, not as CUDA graphs (or YANTRA_GRAPHS=0); serves kernels never"
            " captured in a graph",
        )
        sp.add_argument(
            "--batch",
            type=bounded(0, 256),
            metavar="N",
            help="requests decoded together in one step (default 64 on a GPU, 8 on a CPU, or YANTRA_BATCH;"
            " 0: each request alone)",
        )
