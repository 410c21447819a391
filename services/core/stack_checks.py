"""What `yantra up` checks before it starts anything, each failure a StackError in one line: the data dir (a
directory it can write, on a disk with room) and the port of the embedded nats-server (the one this data dir's last
`yantra up` used, kept so that a client or a config that wrote the URL down keeps working across restarts)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from services.core.nats_launcher import free_port, port_problem
from services.core.settings import Settings

NATS_PORT_FILE = "nats.port"  # the embedded nats-server's port, reused by the next `yantra up` on this data dir


class StackError(RuntimeError):
    pass


def check_data_dir(data_dir: Path) -> None:
    """StackError, in one line, when `data_dir` cannot be a data dir: it, or the nearest of its parents
    that exists, is not a directory. Every command that reads or writes the data dir checks this first."""
    existing = data_dir
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if existing.is_dir():
        return
    if existing == data_dir:
        problem = "exists and is not a directory"
    else:
        problem = f"cannot be created: {existing} is not a directory"
    raise StackError(f"the data dir {data_dir} {problem}; give --data-dir (or YANTRA_DATA_DIR) a directory")


def _disk_full(exc: OSError) -> bool:
    return exc.errno in (errno.ENOSPC, errno.EDQUOT)


def _what_to_do(exc: OSError) -> str:
    if _disk_full(exc):
        return "free some space there, or give --data-dir (or YANTRA_DATA_DIR) a directory on another disk"
    return "give --data-dir (or YANTRA_DATA_DIR) a writable directory"


def write_problem(path: Path, exc: OSError) -> str:
    """Why `path` could not be written, in one line that says what to do."""
    return f"cannot write {path}: {exc.strerror or exc}; {_what_to_do(exc)}"


def check_writable(data_dir: Path) -> None:
    """StackError, in one line, unless `data_dir` can be made and a file written in it: found before anything
    starts, not as an OSError halfway through (a read-only or full file system, a directory we may not write).

    A probe file rather than os.access: as root, access() says yes to a directory whose mode forbids writing,
    and neither it nor the mode tells of a full disk or an immutable directory."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StackError(f"cannot create the data dir {data_dir}: {exc.strerror or exc}") from exc
    probe = data_dir / f".write-probe.{os.getpid()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, b"\0" * 4096)
            os.fsync(fd)  # a full disk may accept the write into the page cache and fail only here
        finally:
            os.close(fd)
            probe.unlink(missing_ok=True)
    except OSError as exc:
        state = "is full" if _disk_full(exc) else "is not writable"
        raise StackError(f"the data dir {data_dir} {state} ({exc.strerror or exc}); {_what_to_do(exc)}") from exc


def ports_of(addr: str) -> tuple[int, ...]:
    """The port of a "host:port" address, as a tuple to avoid; empty when it names none."""
    port = addr.rpartition(":")[2]
    return (int(port),) if port.isdigit() else ()


def remembered_port(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() and 1 <= int(text) <= 65535 else None


def _unavailable(port: int, avoid: tuple[int, ...]) -> str | None:
    """Why the embedded nats-server cannot have `port` now; None when it can."""
    return "it is YANTRA_SERVER_ADDR's port" if port in avoid else port_problem(port)


def choose_nats_port(settings: Settings) -> tuple[int, str | None]:
    """The embedded nats-server's port, and a line for the user when it is not the one they had.

    --nats-port (YANTRA_NATS_PORT) when given: StackError when it cannot be had. Else the one this data dir's
    last `yantra up` used (NATS_PORT_FILE), so a client or a config that wrote the URL down keeps working
    across restarts; when that one is taken, another free one, saying so. The inference server's port is
    never taken: it is not listening yet, so the OS could offer it."""
    avoid = ports_of(settings.server_addr)
    asked = settings.nats_port
    if asked is not None:
        problem = _unavailable(asked, avoid)
        if problem:
            raise StackError(
                f"cannot start the embedded nats-server on port {asked} (--nats-port or YANTRA_NATS_PORT): {problem};"
                " free it, or choose another port"
            )
        return asked, None
    path = settings.data_dir / NATS_PORT_FILE
    remembered = remembered_port(path)
    if remembered is None:
        return free_port(avoid), None
    problem = _unavailable(remembered, avoid)
    if problem is None:
        return remembered, None
    port = free_port(avoid)
    return port, (
        f"the embedded nats-server's port {remembered} (this data dir's last) cannot be had: {problem}; "
        f"it listens on {port} instead (--nats-port or YANTRA_NATS_PORT pins one)"
    )
