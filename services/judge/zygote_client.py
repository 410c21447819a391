"""The judge's side of the sandbox zygote (services.judge.zygote): start it, ask it for children, hear them end.

One zygote per event loop and kind of child (interpreted or on the GPU), started on first use and again after
it died. A child of the zygote is handled like an `asyncio.subprocess.Process`: `pid`, `stdin` (a stream
writer), `wait()`, `returncode`. Whatever goes wrong with the zygote (it cannot start, it died, it refused a
request) raises `ZygoteUnavailable`: the sandbox then starts the child itself, as it always could.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

log = logging.getLogger(__name__)

ANSWER_FD, READY_FD = 3, 4  # where the child finds its answer and go-ahead descriptors (services.judge.zygote)
MAX_MESSAGE = 1 << 16


class ZygoteUnavailable(RuntimeError):
    pass


class ZygoteChild:
    """A child the zygote forked: what run_job uses of an asyncio.subprocess.Process."""

    def __init__(self, pid: int, stdin: asyncio.StreamWriter, exited: asyncio.Future):
        self.pid, self.stdin, self._exited = pid, stdin, exited
        self.returncode: int | None = None

    async def wait(self) -> int:
        self.returncode = await asyncio.shield(self._exited)
        return self.returncode


class Zygote:
    def __init__(self, make_env: Callable[[Path], dict[str, str]], loop: asyncio.AbstractEventLoop):
        """`make_env(scratch)`: the sandbox's scrubbed environment, its caches in the zygote's own scratch."""
        self.loop = loop
        self.scratch = Path(tempfile.mkdtemp(prefix="yantra-zygote-"))
        for sub in ("tmp", "cache"):
            (self.scratch / sub).mkdir()
        env = make_env(self.scratch)
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.log_path = self.scratch / "zygote.log"
        with self.log_path.open("wb") as out:
            self.proc = _popen(theirs, env, self.scratch, out)
        theirs.close()
        self.sock.setblocking(False)
        self.next_id = 0
        self.replies: dict[int, asyncio.Future] = {}
        self.exits: dict[int, asyncio.Future] = {}
        self.dead = False
        loop.add_reader(self.sock.fileno(), self._on_message)

    @property
    def alive(self) -> bool:
        return not self.dead and self.proc.poll() is None

    def _on_message(self) -> None:
        try:
            data = self.sock.recv(MAX_MESSAGE)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._died()
            return
        message = json.loads(data)
        if "id" in message:
            if "pid" in message:  # a child forked: its end is awaited from here on (in order: before its exit)
                message["exited"] = self.exits[message["pid"]] = self.loop.create_future()
            future = self.replies.pop(message["id"], None)
            if future is not None and not future.done():
                future.set_result(message)
        elif "pid" in message:  # popped: a pid the kernel hands out again later is another child
            future = self.exits.pop(message["pid"], None)
            if future is not None and not future.done():
                future.set_result(int(message["code"]))

    def _died(self) -> None:
        """The zygote is gone: pending requests fail (the sandbox starts those children itself); a child whose
        end it can no longer report is reported killed (the sandbox reaps its group and uid regardless)."""
        if self.dead:
            return
        self.dead = True
        with suppress(Exception):
            self.loop.remove_reader(self.sock.fileno())
        for future in self.replies.values():
            if not future.done():
                future.set_exception(ZygoteUnavailable(f"the zygote died ({_tail(self.log_path)})"))
        for future in self.exits.values():
            if not future.done():
                future.set_result(-9)
        self.replies.clear()
        self.exits.clear()

    async def spawn(self, env: dict[str, str], cwd: Path, preload: str, log_fd: int, answer_fd: int,
                    ready_fd: int) -> ZygoteChild:  # fmt: skip
        """A child in `cwd` with `env`, its stdout and stderr on `log_fd`; `answer_fd` and `ready_fd` become its
        ANSWER_FD and READY_FD. The caller keeps (and closes) its own copies of the three descriptors."""
        if not self.alive:
            raise ZygoteUnavailable("the zygote is not running")
        stdin_r, stdin_w = os.pipe()
        self.next_id += 1
        request_id = self.next_id
        reply = self.replies[request_id] = self.loop.create_future()
        try:
            payload = json.dumps({"id": request_id, "env": env, "cwd": str(cwd), "preload": preload}).encode()
            socket.send_fds(self.sock, [payload], [stdin_r, log_fd, answer_fd, ready_fd])
        except OSError as exc:
            self.replies.pop(request_id, None)
            os.close(stdin_w)
            self._died()
            raise ZygoteUnavailable(f"the zygote does not take requests ({exc})") from exc
        finally:
            os.close(stdin_r)
        try:
            message = await reply
        except BaseException:
            os.close(stdin_w)
            raise
        if "error" in message:
            os.close(stdin_w)
            raise ZygoteUnavailable(f"the zygote could not fork: {message['error']}")
        pid = int(message["pid"])
        transport, protocol = await self.loop.connect_write_pipe(
            lambda: asyncio.streams.FlowControlMixin(loop=self.loop), os.fdopen(stdin_w, "wb", buffering=0)
        )
        writer = asyncio.StreamWriter(transport, protocol, None, self.loop)
        return ZygoteChild(pid, writer, message["exited"])

    def close(self) -> None:
        self._died()
        with suppress(OSError):
            self.sock.close()
        with suppress(OSError):
            self.proc.kill()
        with suppress(Exception):
            self.proc.wait(timeout=5)
        shutil.rmtree(self.scratch, ignore_errors=True)


def _popen(sock: socket.socket, env: dict[str, str], cwd: Path, out):
    import subprocess

    return subprocess.Popen(
        [sys.executable, "-s", "-m", "services.judge.zygote", str(sock.fileno())],
        cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out, pass_fds=(sock.fileno(),),
        start_new_session=True,
    )  # fmt: skip


def _tail(path: Path, chars: int = 500) -> str:
    with suppress(OSError):
        return path.read_text(errors="replace")[-chars:].strip() or "no output"
    return "no log"


_ZYGOTES: dict[bool, Zygote] = {}
MAX_FAILURES = 3  # then this process starts every child itself: a zygote that keeps failing costs each job time
_failures = 0


def zygote_for(use_gpu: bool, make_env: Callable[[Path], dict[str, str]]) -> Zygote:
    """This loop's zygote for interpreted or GPU children, started (again) when there is none alive."""
    if _failures >= MAX_FAILURES:
        raise ZygoteUnavailable(f"the zygote failed {_failures} times: children are started one by one")
    loop = asyncio.get_running_loop()
    current = _ZYGOTES.get(use_gpu)
    if current is not None and current.loop is loop and current.alive:
        return current
    if current is not None:
        current.close()
    try:
        _ZYGOTES[use_gpu] = Zygote(make_env, loop)
    except OSError as exc:  # counted by the caller, as every failure is
        raise ZygoteUnavailable(f"the zygote could not start ({exc})") from exc
    return _ZYGOTES[use_gpu]


def failed(why: str) -> None:
    """Count a zygote failure (the sandbox fell back to a child of its own)."""
    global _failures
    _failures += 1
    log.warning("sandbox zygote: %s; this child is started on its own (%d of %d failures)", why, _failures,
                MAX_FAILURES)  # fmt: skip


def close_all() -> None:
    for zygote in _ZYGOTES.values():
        zygote.close()
    _ZYGOTES.clear()


atexit.register(close_all)  # the zygote's scratch goes with the judge (the zygote itself ends at end of file)
