"""Runs untrusted candidate code in a child process: scrubbed environment, own scratch, walls, a kill.

The child (`services.judge.sandbox_child`, job on stdin; forked from the judge's zygote, which has done the heavy
imports once, or started as `python -m services.judge.sandbox_child`) gets only what it needs: PATH,
HOME/TMPDIR/caches inside its scratch directory, PYTHONPATH = the repo root, CUDA_VISIBLE_DEVICES / LD_LIBRARY_PATH
when set (the GPU driver libraries), TRITON_INTERPRET=1 without a GPU. Nothing else crosses: an API key in the judge's
environment is not readable there. The child raises its own walls (services.judge.sandbox_walls: network namespace, a
uid of its own, resource limits, an audit hook). It starts in a new session; on timeout the whole process group, and
every process left under its uid, is SIGKILLed. Its answer comes back through an inherited file descriptor to an
already unlinked file, carrying a nonce sent on stdin: nothing on disk can be swapped for it, and nothing the
candidate prints is read as an answer.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import secrets
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from google.protobuf import json_format

from services.core.pb import events_pb2 as pb
from services.judge import gpu_fence, zygote_client
from services.judge.sandbox_walls import UID_BASE

REPO_ROOT = Path(__file__).resolve().parents[2]
PASSTHROUGH_ENV = ("PATH", "CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH")
LOG_TAIL_CHARS = 2000
MAX_RESULT_BYTES = 4 << 20
GiB = 1 << 30
MAX_OUTPUT_BYTES = 4 << 30  # the child's outputs file; larger is not read (and fails as missing outputs)
CASES_FILE, OUTPUTS_FILE = "cases.pt", "outputs.pt"  # in scratch: the parent's cases in, the child's outputs out
FIRST_PASS_FILE = "first-pass.json"  # the child's facts of its first pass, read before the go-ahead
JUDGE_CACHE = "judge-cache"  # in scratch; written only in the child's judge phases (services.judge.sandbox_walls)

SANDBOX_RULES: dict[str, str] = {
    "timeout": "the child is SIGKILLed, with everything it started, when its time runs out",
    "memory-limit": "an allocation beyond the sandbox's memory limit (address space on CPU, the GPU's memory)",
    "crashed": "the child died without an answer (a signal, an early exit) or could not raise its walls",
    "memory-fault": "every tensor has inaccessible memory after its end or before its start (a CPU's pages; a GPU's "
    "unmapped addresses where its driver maps them): a read or write there faults the child",
    "sandbox-wall": "the walls refused an action (network, a write outside scratch, a process, another's /proc)",
    "untrusted-result": "the child's answer must carry the judge's nonce and parse",
    "gpu-unhealthy": "the GPU must pass a health probe in the judge's own process after the child",
}
_MEMORY = re.compile(r"can't allocate memory|out of memory|OutOfMemoryError|MemoryError|Cannot allocate memory", re.I)


GoAhead = Callable[[bytes, dict], Awaitable[bool]]


@dataclass(frozen=True)
class SandboxJob:
    """What the child needs to judge one candidate: everything is plain data (it crosses as JSON)."""

    source: str
    contract: bytes  # a serialized pb.Contract
    plan: bytes  # a serialized pb.LaunchPlan
    class_path: str
    width: int
    eps: float | None
    eps_attr: str | None
    param_dtype: str
    input_dtype: str
    live_shape: list[int]
    device: str  # "cuda" | "cpu"
    seed_base: int  # the base the parent drew its cases from (the oracle instances' weights follow it)
    family: str = "row_reduction"  # the op family whose wrapper runs the candidate (services.ops)
    variant: str = ""  # what the live module computes, where the family's oracle needs it (a gated MLP's act)
    second_shape: list[int] = field(default_factory=list)  # a function's second operand's live shape (RoPE's k)
    third_shape: list[int] = field(default_factory=list)  # its third's (RoPE's cos: the rotary width last)
    sms: int = 0  # under the interpreter, a persistent grid's "sms" (0: its stand-in); the fenced pass: the GPU's
    sampled: dict[int, str] = field(default_factory=dict)  # the CPU's cases that run a sample of programs: kind

    def to_json(self, nonce: str, result_fd: int, walls: dict, ready_fd: int = -1) -> str:
        data = asdict(self)
        data["ready_fd"] = ready_fd
        data["contract"] = base64.b64encode(self.contract).decode()
        data["plan"] = base64.b64encode(self.plan).decode()
        data["nonce"] = nonce
        data["result_fd"] = result_fd
        data["walls"] = walls
        return json.dumps(data)


@dataclass(frozen=True)
class SandboxLimits:
    timeout_s: float
    max_file_bytes: int = 1 * GiB
    address_space_bytes: int | None = 16 * GiB  # CPU only: CUDA maps far more virtual memory than it uses
    processes: int = 256  # processes + threads under the child's own uid (more where it shares the judge's)
    network_namespace: bool = True
    drop_root: bool = True
    audit_hook: bool = True
    zygote: bool = True  # children forked from the judge's zygote (services.judge.zygote), not started afresh

    @classmethod
    def from_env(cls, timeout_s: float, env: dict[str, str] | None = None) -> SandboxLimits:
        """YANTRA_JUDGE_WALLS="-netns,-drop_root,-audit" switches walls off (a machine that refuses them)."""
        off = {w.strip().lstrip("-") for w in (env or os.environ).get("YANTRA_JUDGE_WALLS", "").split(",") if w}
        unknown = off - {"netns", "drop_root", "audit"}
        if unknown:
            raise ValueError(f"YANTRA_JUDGE_WALLS names unknown walls {sorted(unknown)} (netns, drop_root, audit)")
        return cls(
            timeout_s=timeout_s,
            network_namespace="netns" not in off,
            drop_root="drop_root" not in off,
            audit_hook="audit" not in off,
        )


@dataclass(frozen=True)
class SandboxOutcome:
    """What came back: the child's facts (plain data), its timing figures, its outputs file, how it ended."""

    facts: dict
    timing: pb.TimingEvidence
    sandbox: pb.SandboxEvidence = field(default_factory=pb.SandboxEvidence)
    log_tail: str = field(default="", compare=False)
    outputs: bytes = field(default=b"", repr=False)  # outputs.pt as the child left it; loaded with weights_only


def child_env(scratch: Path, use_gpu: bool, parent: dict[str, str] | None = None) -> dict[str, str]:
    parent = dict(os.environ) if parent is None else parent
    env = {k: parent[k] for k in PASSTHROUGH_ENV if parent.get(k)}
    env.setdefault("PATH", os.defpath)
    env.update(
        HOME=str(scratch),
        TMPDIR=str(scratch / "tmp"),
        XDG_CACHE_HOME=str(scratch / "cache"),
        USER="yantra-sandbox",  # getpass.getuser() must not need a passwd entry for the sandbox uid
        LOGNAME="yantra-sandbox",
        PYTHONPATH=str(REPO_ROOT),
        PYTHONDONTWRITEBYTECODE="1",  # no .pyc written beside the repo's sources
        TRITON_CACHE_DIR=str(scratch / "triton-cache"),  # the candidate's kernels
        TORCHINDUCTOR_CACHE_DIR=str(scratch / JUDGE_CACHE / "inductor"),  # the compiled baseline: the judge's
        TORCHINDUCTOR_COMPILE_THREADS="1",  # compile in-process: no worker pool to spawn
        CUDA_CACHE_PATH=str(scratch / "cuda-cache"),
    )
    if not use_gpu:
        # no GPU for a CPU child (the fenced pass runs one on a GPU box); tiny tensors, several children side by side
        env.update(TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    return env


def _walls(limits: SandboxLimits, use_gpu: bool) -> dict:
    cpu_s = int(limits.timeout_s * max(1, min(os.cpu_count() or 1, 8))) + 30
    return {
        "netns": limits.network_namespace,
        "drop_root": limits.drop_root,
        "audit": limits.audit_hook,
        "cpu_s": cpu_s,  # a backstop should the judge die before it can kill the child
        "file_bytes": limits.max_file_bytes,
        "address_bytes": None if use_gpu else limits.address_space_bytes,
        "processes": limits.processes,
    }


def _tail(path: Path) -> str:
    with suppress(OSError):
        with path.open("rb") as fh:
            fh.seek(max(0, path.stat().st_size - LOG_TAIL_CHARS))
            return fh.read().decode(errors="replace")
    return ""


def _exit_text(code: int | None) -> str:
    if code is None:
        return "running"
    if code >= 0:
        return f"code {code}"
    try:
        return f"signal {signal.Signals(-code).name}"
    except ValueError:
        return f"signal {-code}"


def _kill_group(pid: int) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _kill_uid(uid: int) -> None:
    """SIGKILL every process left under the child's own uid (one that left the process group too)."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        with suppress(OSError, ValueError, KeyError):
            fields = dict(
                line.split(":", 1) for line in Path(entry.path, "status").read_text().splitlines() if ":" in line
            )
            if int(fields["Uid"].split()[0]) == uid:
                os.kill(int(entry.name), signal.SIGKILL)


def _read_answer(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks, total = [], 0
    while total <= MAX_RESULT_BYTES:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def _failed(rule: str, error: str, reason: str, sandbox: pb.SandboxEvidence, log_tail: str = "") -> SandboxOutcome:
    sandbox.rule_id, sandbox.error = rule, error
    return SandboxOutcome({"child_error": error}, pb.TimingEvidence(measured=False, reason=reason), sandbox, log_tail)


def _parse_answer(raw: bytes, nonce: str, sandbox: pb.SandboxEvidence, log_tail: str) -> SandboxOutcome:
    try:
        data = json.loads(raw.decode())
    except (UnicodeDecodeError, ValueError) as exc:
        return _failed("untrusted-result", f"the child's answer does not parse ({exc})", "no result", sandbox, log_tail)
    if not isinstance(data, dict) or data.get("nonce") != nonce:
        return _failed("untrusted-result", "the child's answer lacks the judge's nonce: not believed", "no result",
                       sandbox, log_tail)  # fmt: skip
    facts = data.get("facts")
    if not isinstance(facts, dict):
        return _failed("untrusted-result", "the child's answer holds no facts", "no result", sandbox, log_tail)
    try:
        timing = json_format.ParseDict(data.get("timing", {}), pb.TimingEvidence())
    except json_format.ParseError as exc:
        return _failed("untrusted-result", f"the child's answer does not parse: {exc}", "no result", sandbox, log_tail)
    walls = data.get("walls") or {}
    sandbox.network = str(walls.get("network", ""))
    sandbox.user = str(walls.get("user", ""))
    sandbox.walls.extend(str(w) for w in walls.get("walls", []))
    sandbox.refused.extend(str(r) for r in walls.get("refused", []))
    late = facts.get("call_timeout")
    if walls.get("failed"):
        sandbox.rule_id, sandbox.error = "crashed", f"the sandbox could not raise its walls: {walls['failed']}"
    elif isinstance(late, dict):  # one call past its own limit (services.core.call_limits): stopped there
        sandbox.rule_id, sandbox.error = (
            "timeout",
            str(late.get("detail") or "a call ran past its per-call limit")[:500],
        )
    elif sandbox.refused:
        sandbox.rule_id, sandbox.error = "sandbox-wall", f"the walls refused: {sandbox.refused[0]}"
    elif _MEMORY.search(str(facts.get("child_error", "")) + str(facts.get("problems", ""))):
        sandbox.rule_id, sandbox.error = "memory-limit", str(facts.get("child_error") or facts.get("problems"))[:500]
    return SandboxOutcome(facts, timing, sandbox, log_tail)


async def run_job(
    job: SandboxJob,
    limits: SandboxLimits,
    *,
    use_gpu: bool,
    cases: bytes = b"",
    scratch_parent: Path | None = None,
    keep_scratch: bool = False,
    go_ahead: GoAhead | None = None,
) -> SandboxOutcome:
    """Run one job in a fresh sandbox child on `cases` (torch.save'd by the parent) and return what came back.

    The child runs every case first and waits; `go_ahead(outputs, facts)` (the parent judging that first
    pass) says whether it goes on to the timing calls and the re-run, or stops: a wrong candidate costs no
    timing.
    """
    if scratch_parent is not None:
        scratch_parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="yantra-judge-", dir=scratch_parent))
    for sub in ("tmp", "cache", JUDGE_CACHE):
        (scratch / sub).mkdir()
    (scratch / CASES_FILE).write_bytes(cases)
    (scratch / CASES_FILE).chmod(0o644)  # the child may run under a uid of its own: it reads, it cannot write
    nonce = secrets.token_hex(16)
    answer_path = scratch / ".answer"
    answer_fd = os.open(answer_path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    answer_path.unlink()  # only the descriptor remains: nothing on disk can be swapped for the answer
    env = child_env(scratch, use_gpu)
    sandbox = pb.SandboxEvidence(ran=True, env_keys=sorted(env))
    log_path = scratch / "child.log"
    started = time.monotonic()
    proc = None
    try:
        with log_path.open("wb") as log:
            ready_r, ready_w = os.pipe()  # the child writes one byte here once its outputs are on disk

            def left() -> float:
                return max(1.0, limits.timeout_s - (time.monotonic() - started))

            try:
                proc, fds = await _start_child(job, env, scratch, use_gpu, limits, log, answer_fd, ready_w, left)
            finally:
                os.close(ready_w)  # the child's copy is the only one: its exit reads as end of file
            payload = job.to_json(nonce, fds[0], _walls(limits, use_gpu), fds[1]).encode()

            try:
                await asyncio.wait_for(_send(proc, payload), timeout=limits.timeout_s)
                go = await asyncio.wait_for(_first_pass(ready_r, scratch, go_ahead), timeout=left())
                await asyncio.wait_for(_say(proc, b"time\n" if go else b"stop\n"), timeout=left())
                await asyncio.wait_for(proc.wait(), timeout=left())
            except TimeoutError:
                _reap(proc.pid)
                await proc.wait()
                sandbox.exit, sandbox.wall_s = "timeout", time.monotonic() - started
                error = f"killed after the {limits.timeout_s:g} s timeout"
                return _failed("timeout", error, "the sandbox timed out", sandbox, _tail(log_path))
            except asyncio.CancelledError:
                _reap(proc.pid)
                raise
            finally:
                os.close(ready_r)
            _reap(proc.pid)  # nothing the candidate started may outlive its judging
        sandbox.exit, sandbox.wall_s = _exit_text(proc.returncode), time.monotonic() - started
        log_tail = _tail(log_path)
        raw = _read_answer(answer_fd)
        if not raw:
            rule = "memory-limit" if _MEMORY.search(log_tail) else "crashed"
            faults = (gpu_fence.GPU_FAULT_EXIT,) if use_gpu else (-signal.SIGSEGV, -signal.SIGBUS)  # met a fence
            rule = "memory-fault" if rule == "crashed" and proc.returncode in faults else rule
            error = f"the sandbox child exited with {sandbox.exit} and no answer; log: {log_tail[-500:]}"
            return _failed(rule, error, "the child failed", sandbox, log_tail)
        outcome = _parse_answer(raw, nonce, sandbox, log_tail)
        return replace(outcome, outputs=_read_outputs(scratch / OUTPUTS_FILE))
    finally:
        os.close(answer_fd)
        if not keep_scratch:
            shutil.rmtree(scratch, ignore_errors=True)


async def _start_child(job, env, scratch, use_gpu, limits, log, answer_fd, ready_w, left):
    """The child and the numbers of its answer and ready descriptors: forked from the zygote (its imports done
    once for every child), or started afresh where the zygote is switched off or fails."""
    if limits.zygote:
        try:
            zygote = zygote_client.zygote_for(use_gpu, lambda zscratch: child_env(zscratch, use_gpu))
            spawn = zygote.spawn(env, scratch, job.class_path, log.fileno(), answer_fd, ready_w)
            child = await asyncio.wait_for(spawn, timeout=left())
            return child, (zygote_client.ANSWER_FD, zygote_client.READY_FD)
        except (zygote_client.ZygoteUnavailable, TimeoutError) as exc:
            zygote_client.failed(str(exc) or "no answer in time")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-s", "-m", "services.judge.sandbox_child",
        cwd=scratch, env=env, stdin=asyncio.subprocess.PIPE, stdout=log, stderr=log,
        start_new_session=True, pass_fds=(answer_fd, ready_w),
    )  # fmt: skip
    return proc, (answer_fd, ready_w)


def _read_outputs(path: Path) -> bytes:
    with suppress(OSError):
        if path.is_file() and not path.is_symlink() and path.stat().st_size <= MAX_OUTPUT_BYTES:
            return path.read_bytes()
    return b""


async def _send(proc: asyncio.subprocess.Process, payload: bytes) -> None:
    """The job, as one line: stdin stays open for the go-ahead (`_say`)."""
    assert proc.stdin is not None
    with suppress(BrokenPipeError, ConnectionResetError):
        proc.stdin.write(payload + b"\n")
        await proc.stdin.drain()


async def _say(proc: asyncio.subprocess.Process, word: bytes) -> None:
    assert proc.stdin is not None
    with suppress(BrokenPipeError, ConnectionResetError):
        proc.stdin.write(word)
        await proc.stdin.drain()
    proc.stdin.close()


async def _first_pass(ready_r: int, scratch: Path, go_ahead: GoAhead | None) -> bool:
    """Wait for the child's first pass (its outputs of every case), then ask `go_ahead` whether to time it.

    A child that exits without reaching it (a crash, a load failure it already answered) reads as end of
    file: nothing to decide. Without `go_ahead` every candidate that got that far is timed.
    """
    signal = await asyncio.to_thread(os.read, ready_r, 1)
    if not signal or go_ahead is None:
        return True
    try:
        facts = json.loads((scratch / FIRST_PASS_FILE).read_text())
    except (OSError, ValueError):
        return False
    return bool(await go_ahead(_read_outputs(scratch / OUTPUTS_FILE), facts if isinstance(facts, dict) else {}))


def _reap(pid: int) -> None:
    _kill_group(pid)
    if os.getuid() == 0:
        _kill_uid(UID_BASE + pid)
