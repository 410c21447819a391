"""The sandbox's zygote: one process that has imported torch, Triton and transformers, forking a child per job.

A sandbox child spent most of its life importing (torch, Triton, a transformers modeling file: 5-10 s of CPU
each, every candidate); the zygote imports once and forks. It never runs candidate code, never touches CUDA
(a forked child initialises it itself) and holds nothing secret: the judge starts it with the sandbox's scrubbed
environment (`sandbox.child_env`). Each child is what `python -m services.judge.sandbox_child` was: a new session,
the job's environment and working directory, only its stdin, log (stdout and stderr), answer and go-ahead
descriptors open (as 0, 1/2, 3 and 4: nothing of the zygote's survives the fork), then the same `main`, which
raises the walls before it reads the candidate.

    python -s -m services.judge.zygote FD      (started by the judge: FD a SOCK_SEQPACKET socket)

The protocol, one JSON message each way: the judge sends {"id", "env", "cwd", "preload"} with the child's four
descriptors attached (SCM_RIGHTS); the zygote imports `preload` (the target's module: trusted, from the profile)
so later children find it imported, forks, and answers {"id", "pid"}; when a child ends it sends {"pid", "code"}
(`code` as subprocess reports it: negative for a signal). End of file on the socket (the judge gone) ends it.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import socket
import sys
import traceback

CHILD_FDS = 4  # stdin, log, answer, ready: in the child 0, 1 and 2, 3, 4
ANSWER_FD, READY_FD = 3, 4
MAX_MESSAGE = 1 << 20


def _preload(device: str) -> None:
    """What every child imports before its walls go up (services.judge.sandbox_child._prepare), once."""
    import numpy  # noqa: F401
    import torch  # noqa: F401
    import transformers.modeling_utils  # noqa: F401  (the bulk of any modeling file's import)
    import triton  # noqa: F401
    import triton.language  # noqa: F401

    from services.judge import (  # noqa: F401
        cases,
        module_factory,
        poison,
        run_cases,
        sandbox_child,  # noqa: F401
        subjects,
        tamper,
    )
    from services.ops import FAMILIES, judging

    for name in FAMILIES:  # every family's cases, oracle and subject
        judging(name)

    if device == "cuda":
        import triton.testing  # noqa: F401

        from services.judge import timing  # noqa: F401


def _import_target(path: str) -> None:
    """Import the module a class or function path names (the child would otherwise import it, every time)."""
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            importlib.import_module(".".join(parts[:cut]))
            return
        except ImportError:
            continue
        except Exception:  # the child imports it again and reports what went wrong
            return


def _child(request: dict, fds: list[int]) -> None:
    """In the forked child: become what a fresh `python -m services.judge.sandbox_child` was, run it, exit."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()
        import fcntl

        high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 64) for fd in fds]  # out of the way of the targets below
        stdin, log, answer, ready = high
        for fd, target in ((stdin, 0), (log, 1), (log, 2), (answer, ANSWER_FD), (ready, READY_FD)):
            os.dup2(fd, target)
        os.closerange(READY_FD + 1, os.sysconf("SC_OPEN_MAX"))  # the zygote's socket, its pipes, the copies
        os.environ.clear()
        os.environ.update(request["env"])
        # What the imports computed from the zygote's own scratch paths: recomputed from the job's (a write the
        # child makes under the zygote's scratch is refused by its walls: fail closed, never let through)
        import tempfile

        tempfile.tempdir = None
        os.chdir(request["cwd"])
        sys.path[0] = request["cwd"]  # as `python -m` run there puts it
        sys.argv = ["services.judge.sandbox_child"]
        from services.judge import sandbox_child

        code = sandbox_child.main(sys.argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        sock.send(json.dumps({"pid": pid, "code": os.waitstatus_to_exitcode(status)}).encode())


def serve(sock: socket.socket, device: str) -> None:
    _preload(device)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wakeup byte is written
    while True:
        ready, _, _ = select.select([sock, wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 4096)
            _reap(sock)
        if sock not in ready:
            continue
        message, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, CHILD_FDS)
        if not message:
            return  # the judge is gone: its children are reaped by their own process groups
        request = json.loads(message)
        try:
            if len(fds) != CHILD_FDS:
                raise ValueError(f"a spawn request carries {CHILD_FDS} descriptors, not {len(fds)}")
            if request.get("preload"):
                _import_target(request["preload"])
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(request, fds)
            reply = {"id": request["id"], "pid": pid}
        except Exception as exc:  # the judge falls back to a child of its own
            reply = {"id": request["id"], "error": f"{type(exc).__name__}: {exc}"}
        finally:
            for fd in fds:
                os.close(fd)  # the child's are its own now: its exit must read as end of file to the judge
        sock.send(json.dumps(reply).encode())


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[1].isdigit():
        print("usage: python -m services.judge.zygote FD (started by the judge)", file=sys.stderr)
        return 2
    sock = socket.socket(fileno=int(argv[1]))
    device = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
    try:
        serve(sock, device)
    finally:
        scratch = os.getcwd()  # the judge made it for this zygote alone; gone with it, even when the judge was killed
        if os.path.basename(scratch).startswith("yantra-zygote-"):
            import shutil

            shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
