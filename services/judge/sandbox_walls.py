"""The walls the sandbox child raises around itself before it imports the candidate (stdlib only).

Raised in the child, not in a preexec hook of the judge (which has threads): the child starts
single-threaded, so it may enter new namespaces. In order:
1. a network namespace of its own (unshare CLONE_NEWNET; with a user namespace when not root), so
   nothing but a downed loopback exists; where the machine refuses, sockets are refused instead;
2. when started as root, a uid of its own (never root, never shared with another child), so the
   process limit bites and other children's scratch directories are out of reach;
3. resource limits: CPU seconds, file size, core dumps, processes, address space (CPU only);
4. after the judge's own imports, an audit hook that refuses sockets, writes outside the scratch
   directory (and, outside the judge's own phases, into the judge's caches where the compiled
   baselines live), other processes' /proc entries (the judge's environment), signals to other
   processes, and spawning anything but the GPU toolchain Triton itself runs (ptxas, the C
   compiler for its launcher, ldconfig).
Each wall that went up (or could not) is reported in words for the verdict.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
UID_BASE = 2_000_000  # sandbox uids: UID_BASE + the child's pid, unique among running children
GiB = 1 << 30
# Executables Triton and torch.compile run while compiling on a GPU (matched on the basename's start).
TOOLCHAIN = ("ptxas", "ldconfig", "gcc", "cc", "clang", "g++", "c++", "nvcc", "cuobjdump", "nvdisasm", "nvlink",
             "x86_64-linux-gnu-gcc", "file")  # fmt: skip  # file: probed while torch.compile builds (seen on the H200)
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_PATH_EVENTS = {  # event -> indexes of path arguments that are written (removed, renamed, created ...)
    "os.remove": (0,), "os.rmdir": (0,), "os.mkdir": (0,), "os.rename": (0, 1), "os.replace": (0, 1),
    "os.link": (0, 1), "os.symlink": (1,), "os.truncate": (0,), "os.chmod": (0,), "os.chown": (0,),
    "os.utime": (0,), "shutil.rmtree": (0,), "shutil.copyfile": (1,), "shutil.copytree": (1,), "shutil.move": (1,),
    "shutil.chown": (0,), "shutil.make_archive": (0,), "os.chflags": (0,), "os.lchown": (0,), "os.mkfifo": (0,),
    "os.mknod": (0,),
}  # fmt: skip
_REFUSED_ALWAYS = {"os.system", "os.spawn", "os.fork", "os.forkpty", "os.killpg", "pty.spawn", "os.startfile"}


@dataclass
class WallReport:
    """What the walls are, in words, and what they refused (filled in while the candidate runs)."""

    network: str = ""
    user: str = ""
    walls: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def enter_network_namespace(report: WallReport) -> None:
    """A network namespace of our own; as non-root inside a user namespace that maps our own ids."""
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWNET if uid == 0 else CLONE_NEWUSER | CLONE_NEWNET
    try:
        libc = _libc()
        failed = libc.unshare(flags) != 0
        err = ctypes.get_errno() if failed else 0
    except OSError as exc:  # no libc to call: the audit hook is the wall
        failed, err = True, exc.errno or 0
    if failed:
        report.network = "audit-hook"
        report.walls.append(f"no network namespace ({os.strerror(err)}): sockets refused by the audit hook")
        return
    if uid != 0:
        try:  # map our own ids so files keep their owner (an unmapped uid cannot create files)
            _write("/proc/self/setgroups", "deny")
            _write("/proc/self/uid_map", f"{uid} {uid} 1")
            _write("/proc/self/gid_map", f"{gid} {gid} 1")
        except OSError as exc:
            report.walls.append(f"user namespace id map failed ({exc})")
    report.network = "netns"
    report.walls.append("own network namespace: no interfaces but a downed loopback")


def _unreachable(paths: list[str]) -> str | None:
    """The first directory on the way to `paths` that other users cannot enter (mode lacks o+x), if any."""
    for raw in paths:
        path = Path(raw).resolve()
        for directory in [*reversed(path.parents), path] if path.is_dir() else reversed(path.parents):
            try:
                if not directory.stat().st_mode & 0o001:
                    return str(directory)
            except OSError:
                continue
    return None


def _closed_devices() -> str | None:
    """The first NVIDIA device node other users cannot read and write (CUDA needs them all), if any."""
    for node in sorted(Path("/dev").glob("nvidia*")):
        try:
            if node.is_char_device() and node.stat().st_mode & 0o006 != 0o006:
                return str(node)
        except OSError:
            continue
    return None


def drop_root(scratch: Path, report: WallReport, gpu: bool = False) -> int | None:
    """As root: take a uid of our own (UID_BASE + pid) and give it the scratch directory. Returns the uid.

    Only where the interpreter, its libraries and the repo are reachable by other users (a Python
    under /root is not): otherwise the child stays root and says so.
    """
    if os.getuid() != 0:
        report.user = "same user (not root)"
        return None
    blocked = _unreachable([sys.base_prefix, sys.prefix, *(p for p in sys.path if p and os.path.exists(p))])
    blocked = blocked or (_closed_devices() if gpu else None)
    if blocked:
        report.user = "root (not dropped)"
        report.walls.append(f"stays root: {blocked} is closed to other users, so the child needs root")
        return None
    uid = UID_BASE + os.getpid()
    try:
        for directory in [scratch, *(d for d in scratch.iterdir() if d.is_dir() and not d.is_symlink())]:
            os.chown(directory, uid, uid)  # directories only: the judge's log file stays the judge's
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    except OSError as exc:  # a container that forbids it: say so, and keep the other walls
        report.user = "root (could not drop)"
        report.walls.append(f"stays root: dropping to uid {uid} failed ({exc})")
        return None
    report.user = f"uid {uid} (dropped from root)"
    report.walls.append(f"runs as uid {uid}, not root; scratch owned by it alone")
    return uid


def set_limits(report: WallReport, *, cpu_s: int, file_bytes: int, address_bytes: int | None, processes: int) -> None:
    root = os.getuid() == 0
    limits = [
        (resource.RLIMIT_CPU, cpu_s, f"CPU {cpu_s} s"),
        (resource.RLIMIT_FSIZE, file_bytes, f"file size {file_bytes / GiB:g} GiB"),
        (resource.RLIMIT_CORE, 0, "no core dumps"),
        (resource.RLIMIT_NPROC, processes, f"{processes} processes+threads" + (" (root is exempt)" if root else "")),
    ]
    if address_bytes:
        limits.append((resource.RLIMIT_AS, address_bytes, f"address space {address_bytes / GiB:g} GiB"))
    for which, value, words in limits:
        soft, hard = resource.getrlimit(which)
        cap = value if hard == resource.RLIM_INFINITY else min(value, hard)
        try:
            resource.setrlimit(which, (cap, cap if which == resource.RLIMIT_NPROC else hard))
            report.walls.append(f"limit: {words}")
        except (ValueError, OSError) as exc:
            report.walls.append(f"limit {words} not set ({exc})")


def processes_allowed(extra: int, uid: int | None) -> int:
    """RLIMIT_NPROC counts every task of the user: our own uid needs only `extra`, a shared one more."""
    if uid is not None:
        return extra
    me = os.getuid()
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            status = Path(entry.path, "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields.get("Uid", "-1 0").split()[0]) == me:
            total += int(fields.get("Threads", "1"))
    return total + extra


class AuditWall:
    """A sys.addaudithook policy: raises PermissionError for what a kernel must never do."""

    def __init__(self, scratch: Path, judge_dirs: list[Path], allow_toolchain: bool, report: WallReport):
        self.scratch = str(scratch.resolve())
        # The judge's own caches inside scratch (compiled baselines): closed to the candidate, open only
        # while the judge itself works (`judge_phase`), so no candidate can plant a slow baseline there.
        self.judge_dirs = [str(p.resolve()) for p in judge_dirs]
        self.trusted = False
        self.allow_toolchain = allow_toolchain
        self.report = report
        self.pid = str(os.getpid())

    @contextmanager
    def judge_phase(self) -> Iterator[None]:
        self.trusted = True
        try:
            yield
        finally:
            self.trusted = False

    def _may_write(self, path: str) -> str:
        """'' when writing `path` is allowed now (outside the judge's phases), else why not."""
        if path == "/dev/null":
            return ""
        if not self._inside(path, self.scratch):
            return f"writes outside its scratch directory: {path}"
        if any(self._inside(path, d) for d in self.judge_dirs):
            return f"writes into the judge's own cache: {path}"
        return ""

    def refuse(self, what: str) -> None:
        if len(self.report.refused) < 20:
            self.report.refused.append(what)
        raise PermissionError(f"sandbox: {what}")

    def _path(self, raw) -> str | None:
        if isinstance(raw, int) or raw is None:
            return None
        try:
            return os.path.realpath(os.fsdecode(raw))
        except (TypeError, ValueError):
            return None

    def _inside(self, path: str, root: str) -> bool:
        return path == root or path.startswith(root.rstrip("/") + "/")

    def check_open(self, args) -> None:
        path = self._path(args[0])
        if path is None:
            return
        mode = args[1] if len(args) > 1 and isinstance(args[1], str) else ""
        flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
        writes = any(c in mode for c in "wax+") or bool(flags & _WRITE_FLAGS)
        why = self._may_write(path) if writes else ""
        if why:
            self.refuse(why)
        if path.startswith("/proc/"):
            first = path.split("/")[2]
            if first.isdigit() and first != self.pid:
                self.refuse(f"reads another process: {path}")

    def check_spawn(self, event: str, args) -> None:
        exe = args[0] if args else ""
        if event == "subprocess.Popen" and not exe and len(args) > 1:
            argv = args[1]
            exe = argv[0] if isinstance(argv, (list, tuple)) and argv else argv
        name = os.path.basename(os.fsdecode(exe)) if isinstance(exe, (str, bytes, os.PathLike)) else ""
        if self.allow_toolchain and name.startswith(TOOLCHAIN):
            return
        self.refuse(f"starts a process ({event} {name or exe!r})")

    def __call__(self, event: str, args) -> None:
        if self.trusted:  # the judge's own work (compiling baselines): no candidate code runs meanwhile
            return
        if event == "open":
            self.check_open(args)
        elif event in _PATH_EVENTS:
            for index in _PATH_EVENTS[event]:
                path = self._path(args[index]) if index < len(args) else None
                why = self._may_write(path) if path is not None else ""
                if why:
                    self.refuse(f"{event}: {why}")
        elif event in ("subprocess.Popen", "os.exec", "os.posix_spawn"):
            self.check_spawn(event, args)
        elif event in _REFUSED_ALWAYS:
            self.refuse(f"{event} is not allowed")
        elif event == "os.kill" and args and args[0] not in (0, os.getpid()):
            self.refuse(f"signals another process ({args[0]})")
        elif event.startswith("socket."):
            self.check_socket(event, args)

    def check_socket(self, event: str, args) -> None:
        import socket

        if event == "socket.__new__":
            family = args[1] if len(args) > 1 else -1
            if family not in (socket.AF_UNIX, -1):
                self.refuse(f"opens a network socket (family {family})")
        elif event in ("socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg"):
            address = args[1] if len(args) > 1 else None
            if not isinstance(address, (str, bytes)):
                self.refuse(f"{event} to {address!r}")
        elif event in ("socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyname_ex", "socket.gethostbyaddr"):
            self.refuse(f"{event} (name resolution)")


def install_audit_wall(scratch: Path, judge_dirs: list[Path], allow_toolchain: bool, report: WallReport) -> AuditWall:
    wall = AuditWall(scratch, judge_dirs, allow_toolchain, report)
    sys.addaudithook(wall)
    spawn = "only the GPU toolchain (ptxas, cc, ldconfig)" if allow_toolchain else "nothing"
    report.walls.append(
        "audit hook: no sockets, no writes outside scratch or into the judge's caches, no other process's /proc, "
        f"no signals, may spawn {spawn}"
    )
    return wall
