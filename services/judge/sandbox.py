"""Runs untrusted candidate code in a child process: scrubbed environment, own scratch, limits, a kill.

The child (`python -m services.judge.sandbox_child <scratch>/job.json`) gets only what it needs:
PATH, HOME and TRITON_CACHE_DIR inside its scratch directory, PYTHONPATH = the repo root,
CUDA_VISIBLE_DEVICES / LD_LIBRARY_PATH when set (the GPU driver libraries), TRITON_INTERPRET=1
without a GPU. Nothing else crosses: an API key in the judge's environment is not readable there.
It starts in a new session and the whole process group is SIGKILLed on timeout. Its answer comes
back as a JSON file carrying a nonce the candidate cannot read (the job file is deleted first).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import resource
import secrets
import shutil
import signal
import sys
import tempfile
from contextlib import suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path

from google.protobuf import json_format

from services.core.pb import events_pb2 as pb

REPO_ROOT = Path(__file__).resolve().parents[2]
PASSTHROUGH_ENV = ("PATH", "CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH")
LOG_TAIL_CHARS = 2000
GiB = 1 << 30


@dataclass(frozen=True)
class SandboxJob:
    """What the child needs to judge one candidate: everything is plain data (it crosses as JSON)."""

    source: str
    contract: bytes  # a serialized pb.Contract
    class_path: str
    width: int
    eps: float | None
    eps_attr: str | None
    param_dtype: str
    input_dtype: str
    live_shape: list[int]
    device: str  # "cuda" | "cpu"
    seeds: int = 5
    max_rows: int = 0  # cap on the rows of the live shape (0: none); small on CPU, the interpreter is slow
    odd_width: int = 97

    def to_json(self, nonce: str) -> str:
        data = asdict(self)
        data["contract"] = base64.b64encode(self.contract).decode()
        data["nonce"] = nonce
        return json.dumps(data)


@dataclass(frozen=True)
class SandboxLimits:
    timeout_s: float
    max_file_bytes: int = 1 * GiB
    address_space_bytes: int | None = 16 * GiB  # CPU only: CUDA maps far more virtual memory than it uses
    extra_processes: int = 512  # threads count as processes for RLIMIT_NPROC


@dataclass(frozen=True)
class SandboxOutcome:
    correctness: pb.CorrectnessEvidence
    timing: pb.TimingEvidence
    log_tail: str = field(default="", compare=False)


def child_env(scratch: Path, use_gpu: bool, parent: dict[str, str] | None = None) -> dict[str, str]:
    parent = dict(os.environ) if parent is None else parent
    env = {k: parent[k] for k in PASSTHROUGH_ENV if parent.get(k)}
    env.setdefault("PATH", os.defpath)
    env["HOME"] = str(scratch)
    env["PYTHONPATH"] = str(REPO_ROOT)
    env["TRITON_CACHE_DIR"] = str(scratch / "triton-cache")
    if not use_gpu:
        env["TRITON_INTERPRET"] = "1"
    return env


def _tasks_of_user(uid: int) -> int | None:
    """Processes + threads this user runs now (RLIMIT_NPROC counts them all), None when unreadable."""
    total = 0
    try:
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            with suppress(OSError):
                status = Path(entry.path, "status").read_text()
                fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
                if int(fields["Uid"].split()[0]) == uid:
                    total += int(fields["Threads"])
    except OSError:
        return None
    return total


def _preexec(limits: SandboxLimits, use_gpu: bool, nproc: int | None):
    cpu_s = int(limits.timeout_s * max(1, min(os.cpu_count() or 1, 8))) + 30
    settings = [
        (resource.RLIMIT_CPU, cpu_s),  # a backstop should the judge die before it can kill the child
        (resource.RLIMIT_FSIZE, limits.max_file_bytes),
        (resource.RLIMIT_CORE, 0),
    ]
    if nproc is not None:
        settings.append((resource.RLIMIT_NPROC, nproc))
    if not use_gpu and limits.address_space_bytes:
        settings.append((resource.RLIMIT_AS, limits.address_space_bytes))

    def apply() -> None:  # runs in the child between fork and exec: setrlimit calls only
        for which, value in settings:
            soft, hard = resource.getrlimit(which)
            cap = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(which, (cap, hard))

    return apply


def _nproc_limit(limits: SandboxLimits) -> int | None:
    """A cap on the child's processes where that is safe: not for root (ignored), not when /proc is unreadable."""
    uid = os.getuid()
    if uid == 0:
        return None
    current = _tasks_of_user(uid)
    return None if current is None else current + limits.extra_processes


def _failed(error: str, reason: str, log_tail: str = "") -> SandboxOutcome:
    return SandboxOutcome(
        pb.CorrectnessEvidence(passed=False, error=error),
        pb.TimingEvidence(measured=False, reason=reason),
        log_tail,
    )


def _tail(path: Path) -> str:
    with suppress(OSError):
        with path.open("rb") as fh:
            fh.seek(max(0, path.stat().st_size - LOG_TAIL_CHARS))
            return fh.read().decode(errors="replace")
    return ""


def _read_result(scratch: Path, nonce: str, log_tail: str) -> SandboxOutcome:
    try:
        data = json.loads((scratch / "result.json").read_text())
    except (OSError, ValueError) as exc:
        return _failed(f"the sandbox child wrote no readable result ({exc}); log: {log_tail[-500:]}", "no result")
    if not isinstance(data, dict) or data.get("nonce") != nonce:
        return _failed("the sandbox result does not carry the judge's nonce: not believed", "no trusted result")
    try:
        correctness = json_format.ParseDict(data.get("correctness", {}), pb.CorrectnessEvidence())
        timing = json_format.ParseDict(data.get("timing", {}), pb.TimingEvidence())
    except json_format.ParseError as exc:
        return _failed(f"the sandbox result does not parse: {exc}", "no result")
    return SandboxOutcome(correctness, timing, log_tail)


async def run_job(
    job: SandboxJob,
    limits: SandboxLimits,
    *,
    use_gpu: bool,
    scratch_parent: Path | None = None,
    keep_scratch: bool = False,
) -> SandboxOutcome:
    """Run one job in a fresh sandbox child and return what it measured (or why it measured nothing)."""
    if scratch_parent is not None:
        scratch_parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="yantra-judge-", dir=scratch_parent))
    nonce = secrets.token_hex(16)
    job_path = scratch / "job.json"
    job_path.write_text(job.to_json(nonce))
    log_path = scratch / "child.log"
    try:
        with log_path.open("wb") as log:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-s",
                "-m",
                "services.judge.sandbox_child",
                str(job_path),
                cwd=scratch,
                env=child_env(scratch, use_gpu),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                preexec_fn=_preexec(limits, use_gpu, _nproc_limit(limits)),
            )
            try:
                await asyncio.wait_for(proc.wait(), timeout=limits.timeout_s)
            except TimeoutError:
                _kill_group(proc.pid)
                await proc.wait()
                return _failed(
                    f"killed after the {limits.timeout_s:g} s timeout",
                    "the sandbox timed out",
                    _tail(log_path),
                )
            except asyncio.CancelledError:
                _kill_group(proc.pid)
                raise
            _kill_group(proc.pid)  # nothing the candidate started may outlive its judging
        log_tail = _tail(log_path)
        if proc.returncode != 0 and not (scratch / "result.json").exists():
            how = _exit_text(proc.returncode)
            return _failed(f"the sandbox child exited with {how}; log: {log_tail[-500:]}", "the child failed", log_tail)
        return _read_result(scratch, nonce, log_tail)
    finally:
        if not keep_scratch:
            shutil.rmtree(scratch, ignore_errors=True)


def _exit_text(code: int) -> str:
    if code >= 0:
        return f"code {code}"
    try:
        return f"signal {signal.Signals(-code).name}"
    except ValueError:
        return f"signal {-code}"


def _kill_group(pid: int) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
