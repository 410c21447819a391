"""Where a replay's log comes from: an exported file, or a run read back from the stream.

`--replay X` means the file X when one exists, else the run X on the bus. A run read from the
stream comes with the ServerMetrics recorded while it ran, merged in by time, so its serving
timeline replays too.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable, Iterable
from contextlib import suppress
from pathlib import Path

import nats

from services.core import events as ev
from services.core.bus import tls_options
from services.core.events import Recorded
from services.core.logfile import read_log
from services.core.settings import NatsAuth, NatsTls, nats_servers, redact_url
from tui import jetstream

METRICS_MARGIN_NS = 30 * 10**9  # metrics this long before and after the run frame its timeline
CONNECT_TIMEOUT_S = 3.0


class ReplayError(ValueError):
    """The replay source cannot be read; the message says why, in one line."""


def merge_by_time(run_log: Iterable[Recorded], metrics: Iterable[Recorded]) -> list[Recorded]:
    """Metrics slotted into the run log by time; the run's own events keep their stream order."""
    return list(heapq.merge(run_log, metrics, key=lambda r: r.env.time_unix_ns))


def load_file(path: Path) -> list[Recorded]:
    try:
        return read_log(path)
    except OSError as exc:
        raise ReplayError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise ReplayError(str(exc)) from exc


async def load_run(url: str, run_id: str, auth: NatsAuth | None = None, tls: NatsTls | None = None) -> list[Recorded]:
    """A run's events and the metrics around it, read once from the stream (the TUI writes nothing)."""
    credential = auth.connect_options() if auth else {}
    shown = redact_url(url)  # a URL may carry a password
    try:
        nc = await asyncio.wait_for(
            nats.connect(
                nats_servers(url),
                name="yantra-tui-replay",
                connect_timeout=CONNECT_TIMEOUT_S,
                allow_reconnect=False,
                **credential,
                **tls_options(url, tls),
            ),
            CONNECT_TIMEOUT_S + 1.0,
        )
    except Exception as exc:
        raise ReplayError(f"cannot reach NATS at {shown}: {exc or type(exc).__name__}") from exc
    try:
        js = nc.jetstream()
        try:
            run_log = await jetstream.read_run(js, run_id)
        except Exception as exc:
            raise ReplayError(f"cannot read run {run_id} from {shown}: {exc or type(exc).__name__}") from exc
        if not run_log:
            raise ReplayError(f"no run {run_id!r} on {shown} (see `yantra runs`)")
        times = [r.env.time_unix_ns for r in run_log]
        metrics: list[Recorded] = []
        with suppress(Exception):  # a run replays without its metrics rather than not at all
            metrics = await jetstream.read_metrics_between(
                js, min(times) - METRICS_MARGIN_NS, max(times) + METRICS_MARGIN_NS
            )
        return merge_by_time(run_log, metrics)
    finally:
        with suppress(Exception):
            await nc.close()


def resolve_replay(
    target: str, resolve_url: Callable[[], str], auth: NatsAuth | None = None, tls: NatsTls | None = None
) -> tuple[list[Recorded], str]:
    """(the log, a label for the status bar) for `--replay target`; ReplayError says what is wrong."""
    path = Path(target)
    if path.is_file():
        return load_file(path), path.name
    try:
        run_id = ev.check_run_id(target)
    except ValueError as exc:
        raise ReplayError(f"--replay {target!r}: no such file, and not a run id") from exc
    try:
        url = resolve_url()
    except Exception as exc:  # StackError: neither NATS_URL nor a running `yantra up`
        raise ReplayError(f"--replay {target!r}: no such file, and no stream to read run {target} from: {exc}") from exc
    return asyncio.run(load_run(url, run_id, auth, tls)), run_id
