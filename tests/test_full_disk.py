"""A disk that truly fills under a running `yantra up`, then has room again: commands say so in one line, and the
stack recovers without being restarted by hand.

The disk is a small tmpfs mounted in a mount namespace of `yantra up`'s own (unshare -m): the stack, and every
nats-server it starts, keep their data dir there; the test reaches it through /proc/<pid>/root. Skipped where
no such mount can be made. What nats-server does on a write the disk refuses (2.15): the stream whose write
failed logs a "critical write error" and takes nothing more (each publish to it times out) while JetStream still
answers its account info; freeing space changes nothing until nats-server restarts. `yantra up` reads that in
its log and restarts it once the disk has room again.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from services.cli.stack_cmds import JS_MIN_FREE_BYTES
from services.core.nats_launcher import free_port

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parent.parent
DISK = JS_MIN_FREE_BYTES * 4  # room for the stack and, once freed, for a restart (JS_MIN_FREE_BYTES)
MOUNT = 'mount -t tmpfs -o size={size} tmpfs "$1" && shift && exec "$@"'


def _can_mount_a_small_disk(where: Path) -> str:
    """ "" when a tmpfs can be mounted in a mount namespace of a child's own here (and entered); else why not."""
    if shutil.which("unshare") is None or shutil.which("nsenter") is None:
        return "unshare or nsenter is not installed"
    try:
        made = subprocess.run(
            ["unshare", "-m", "sh", "-c", MOUNT.format(size="1m"), "sh", str(where), "true"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return "" if made.returncode == 0 else made.stderr.strip() or f"exit {made.returncode}"


class Up:
    """`yantra up` on a tmpfs of its own; its output gathered by a thread as it comes."""

    def __init__(self, mount: Path):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "YANTRA_"))}
        env["YANTRA_SERVER_ADDR"] = f"127.0.0.1:{free_port()}"
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            ["unshare", "-m", "sh", "-c", MOUNT.format(size=DISK), "sh", str(mount)]
            + [sys.executable, "-m", "services.cli", "up", "--data-dir", str(mount / "d")],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        threading.Thread(target=self._gather, daemon=True).start()
        # its mount, as this process sees it: the same pid (sh and unshare exec), its own root
        self.disk = Path(f"/proc/{self.proc.pid}/root") / mount.relative_to("/")
        self.mount = mount
        self.env = {**env}

    def _gather(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)

    def wait_for(self, text: str, within_s: float) -> None:
        deadline = time.monotonic() + within_s
        while not any(text in line for line in self.lines):
            assert self.proc.poll() is None, "`yantra up` exited:\n" + "".join(self.lines)
            assert time.monotonic() < deadline, f"`yantra up` never said {text!r}:\n" + "".join(self.lines)
            time.sleep(0.2)

    def yantra(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        # in its mount namespace (a path through /proc/<pid>/root resolves to this namespace's own)
        return subprocess.run(
            ["nsenter", "-t", str(self.proc.pid), "-m", sys.executable, "-m", "services.cli", *args]
            + ["--data-dir", str(self.mount / "d")],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def fill(self) -> Path:
        """Fill its disk to the last byte; the filler's path."""
        filler = self.disk / "filler"
        block = b"\0" * (1 << 20)
        with open(filler, "wb", buffering=0) as out:
            try:
                while True:
                    out.write(block)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
        with open(self.disk / "filler-tail", "wb", buffering=0) as out:  # the last partial block too
            try:
                while True:
                    out.write(b"\0" * 512)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
        return filler

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _one_line(result: subprocess.CompletedProcess, command: str) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines and lines[-1].startswith(f"yantra {command}: "), result.stdout + result.stderr
    return lines[-1]


def test_a_disk_that_fills_under_the_stack_is_one_line_and_the_stack_recovers_when_space_returns(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    if why := _can_mount_a_small_disk(mount):
        pytest.skip(f"no small disk can be mounted here: {why}")
    up = Up(mount)
    try:
        up.wait_for("press Ctrl-C", 180)
        filler = up.fill()

        refused = up.yantra("optimize", "--policy", "cpu-untimed", "--max-targets", "1", "--no-wait")
        assert refused.returncode == 2, refused.stdout + refused.stderr
        said = _one_line(refused, "optimize")
        assert "free some space" in said, said
        listed = up.yantra("runs")  # reading needs no room on the disk
        assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stdout + listed.stderr

        up.wait_for("a write to its store failed", 60)  # what nats-server logged, read by `yantra up`
        up.wait_for("is restarted once", 30)  # and it waits for room, not restarting into a full disk
        filler.unlink()
        (up.disk / "filler-tail").unlink()
        up.wait_for("restarting nats-server", 60)

        done = up.yantra("optimize", "--policy", "cpu-untimed", "--max-targets", "1", timeout=600)
        assert done.returncode == 0, f"after space returned: {done.stdout}{done.stderr}\nrefused before: {said}"
        run_id = done.stdout.split()[1].rstrip(":")  # "run <id>: optimising ..."
        listed = up.yantra("runs")
        assert listed.returncode == 0 and run_id in listed.stdout, listed.stdout + listed.stderr
        assert up.proc.poll() is None and "Traceback" not in "".join(up.lines), "".join(up.lines)
    finally:
        up.stop()
