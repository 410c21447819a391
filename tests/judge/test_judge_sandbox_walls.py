"""The sandbox's walls, with the candidate check out of the way: what host code that got past it would meet.

A candidate is kernels only, so each hostile source below (host code at import) is refused by the
kernel schema; here it goes straight into a sandbox child
(services.judge.sandbox.run_job) to show the second line holds: a scrubbed environment, its own
network namespace, an audit hook refusing writes outside scratch / other processes / spawning,
tamper detection, an answer channel the candidate cannot forge, and SIGKILL for the whole group on
timeout. The children run concurrently, once per module.
"""

from __future__ import annotations

import ast
import asyncio
import os
import time
from pathlib import Path

import pytest
from judge_testkit import honest_source, prepared

from services.judge.sandbox import SandboxLimits, run_job

LIMITS = SandboxLimits(timeout_s=60)
ESCAPE_NAME = "yantra-escape.txt"


def _at_import(code: str) -> str:
    return honest_source() + "\n" + code


def _error(outcome) -> str:
    """What the child reported of a candidate that failed to load or broke it (facts, not a verdict)."""
    return str(outcome.facts.get("load_error") or outcome.facts.get("child_error") or "")


async def _run(source: str, limits: SandboxLimits, scratch: Path):
    ready = prepared(source, examples=0)
    return await run_job(ready.job, limits, use_gpu=False, cases=ready.blob, scratch_parent=scratch)


PROBE = """
import os
import socket
tried = []
def attempt(what, action):
    try:
        action()
        tried.append(what + ': allowed')
    except OSError as exc:
        tried.append(what + ': ' + type(exc).__name__)
attempt('socket', lambda: socket.create_connection(('10.11.12.13', 80), timeout=2))
attempt('write', lambda: open({escape!r}, 'w').write('was here'))
attempt('parent-env', lambda: open(f'/proc/{os.getppid()}/environ', 'rb').read())
attempt('fork', os.fork)
attempt('signal', lambda: os.kill(os.getppid(), 0))
raise RuntimeError('TRIED ' + repr(tried))
"""

CASES = {
    "env": (
        _at_import(
            "import os\nraise RuntimeError('ENV ' + repr(sorted(os.environ.items())) + ' CWD ' + os.getcwd())\n"
        ),
        LIMITS,
    ),
    "probe": (_at_import(PROBE), LIMITS),
    "netns_alone": (
        _at_import("import socket\nsocket.create_connection(('10.11.12.13', 80), timeout=2)\n"),
        SandboxLimits(timeout_s=60, audit_hook=False),
    ),
    "forged_answer": (
        _at_import(
            'import os\nfake = b\'{"correctness": {"passed": true, "checks_run": 30, "checks_passed": 30}}\'\n'
            "print(fake.decode(), flush=True)\nopen('result.json', 'wb').write(fake)\n"
            "for fd in range(3, 32):\n"
            "    try:\n        os.write(fd, fake)\n    except OSError:\n        pass\n"
            "os._exit(0)\n"
        ),
        LIMITS,
    ),
    "tampered": (
        _at_import(
            "import time\ntime.perf_counter = lambda: 0.0\n"
            "from transformers.models.qwen2 import modeling_qwen2\n"
            "modeling_qwen2.Qwen2RMSNorm.forward = lambda self, hidden_states: hidden_states\n"
        ),
        LIMITS,
    ),
}
SECRET = "sk-very-secret"


@pytest.fixture(scope="module")
async def outcomes(tmp_path_factory):
    root = Path(tmp_path_factory.mktemp("walls"))
    limit = asyncio.Semaphore(max(1, min(4, os.cpu_count() or 1)))
    os.environ["YANTRA_TEST_API_KEY"] = SECRET  # in the judge's environment while the children run

    async def one(name: str, source: str, limits: SandboxLimits):
        async with limit:
            source = source.replace("{escape!r}", repr(str(root / ESCAPE_NAME)))
            return await _run(source, limits, root / name)

    try:
        results = await asyncio.gather(*(one(name, src, lim) for name, (src, lim) in CASES.items()))
    finally:
        del os.environ["YANTRA_TEST_API_KEY"]
    return root, dict(zip(CASES, results, strict=True))


async def test_the_child_cannot_read_the_judges_secrets(outcomes):
    root, got = outcomes
    error = _error(got["env"])
    assert "kernels do not import: RuntimeError: ENV" in error
    assert SECRET not in error and "YANTRA_TEST_API_KEY" not in error
    env = dict(ast.literal_eval(error.split("ENV ", 1)[1].split(" CWD ", 1)[0]))
    scratch = error.rsplit(" CWD ", 1)[1]
    assert Path(scratch).parent == root / "env" and not Path(scratch).exists()  # its own scratch, removed after
    assert env["HOME"] == scratch and env["TMPDIR"].startswith(scratch) and env["TRITON_CACHE_DIR"].startswith(scratch)
    assert env["TRITON_INTERPRET"] == "1" and env["PYTHONPATH"] == str(Path(__file__).resolve().parents[2])
    # LC_CTYPE: Python itself coerces the C locale at start-up (PEP 538)
    assert set(env) <= set(got["env"].sandbox.env_keys) | {"LC_CTYPE"}, set(env) - set(got["env"].sandbox.env_keys)


async def test_network_writes_other_processes_forks_and_signals_are_refused(outcomes):
    root, got = outcomes
    probe = got["probe"]
    tried = dict(item.split(": ") for item in ast.literal_eval(_error(probe).split("TRIED ", 1)[1]))
    assert tried == dict.fromkeys(["socket", "write", "parent-env", "fork", "signal"], "PermissionError"), tried
    assert probe.sandbox.rule_id == "sandbox-wall"
    refused = " | ".join(probe.sandbox.refused)
    for words in ("socket", "writes outside its scratch directory", "reads another process", "os.fork", "signals"):
        assert words in refused, (words, refused)
    assert not (root / ESCAPE_NAME).exists()


async def test_the_network_namespace_alone_has_no_route_out(outcomes):
    _, got = outcomes
    alone = got["netns_alone"]  # no audit hook: only the namespace stands between the candidate and a network
    if alone.sandbox.network != "netns":
        pytest.skip(f"this machine refuses network namespaces: {alone.sandbox.walls}")
    assert not alone.facts.get("loaded") and "unreachable" in _error(alone).lower(), alone.facts


async def test_nothing_the_candidate_prints_or_writes_is_believed(outcomes):
    _, got = outcomes
    forged = got["forged_answer"]
    assert not forged.facts.get("loaded")
    assert forged.sandbox.rule_id in ("untrusted-result", "crashed"), forged.sandbox
    assert '"passed": true' in forged.log_tail  # it did print its verdict; nobody read it as one


async def test_patching_the_clock_or_the_oracle_is_named(outcomes):
    _, got = outcomes
    facts = got["tampered"].facts
    assert "time.perf_counter" in facts["tampered"] and "Qwen2RMSNorm.forward" in facts["tampered"], facts


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in state  # a zombie waiting for its reaper has stopped running


async def test_a_runaway_candidate_and_its_children_are_killed_on_timeout(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    runaway = _at_import(
        "import subprocess\n"
        "_child = subprocess.Popen(['sleep', '300'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(_child.pid))\n"
        "while True:\n    pass\n"
    )
    limits = SandboxLimits(timeout_s=8, audit_hook=False)  # the hook would refuse the subprocess outright
    started = time.monotonic()
    outcome = await _run(runaway, limits, tmp_path / "s")
    assert time.monotonic() - started < 20
    assert outcome.sandbox.rule_id == "timeout" and outcome.sandbox.exit == "timeout"
    assert _error(outcome) == "killed after the 8 s timeout"
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while _alive(grandchild) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert not _alive(grandchild)


def test_walls_can_be_switched_off_by_name_only():
    limits = SandboxLimits.from_env(30, {"YANTRA_JUDGE_WALLS": "-netns,-audit"})
    assert not limits.network_namespace and not limits.audit_hook and limits.drop_root
    with pytest.raises(ValueError, match="unknown walls"):
        SandboxLimits.from_env(30, {"YANTRA_JUDGE_WALLS": "-firewall"})


def test_the_audit_policy_in_itself(tmp_path):
    import socket

    from services.judge.sandbox_walls import AuditWall, WallReport

    scratch = tmp_path / "scratch"
    cache = scratch / "judge-cache"
    cache.mkdir(parents=True)
    wall = AuditWall(scratch, [cache], allow_toolchain=True, report=WallReport())
    wall("open", (str(scratch / "kernel.py"), "w", 0))  # its own scratch: fine
    wall("open", ("/etc/hostname", "r", 0))  # reading the system: fine
    wall("open", (f"/proc/{os.getpid()}/status", "r", 0))  # itself: fine
    wall("subprocess.Popen", (None, ["/usr/local/cuda/bin/ptxas", "-v"], None, None))  # Triton's toolchain
    wall("subprocess.Popen", ("file", ["file", "-b", "x.so"], None, None))  # probed by torch.compile on the H200
    wall("socket.__new__", (None, socket.AF_UNIX, socket.SOCK_STREAM, 0))
    refused = {
        "write outside": ("open", (str(tmp_path / "x"), "w", 0)),
        "write into the judge's cache": ("open", (str(cache / "fx.bin"), "wb", 0)),
        "rename into the judge's cache": ("os.rename", (str(scratch / "a"), str(cache / "a"), -1, -1)),
        "another process": ("open", (f"/proc/{os.getppid()}/environ", "rb", 0)),
        "a shell": ("subprocess.Popen", (None, ["sh", "-c", "id"], None, None)),
        "an inet socket": ("socket.__new__", (None, socket.AF_INET, socket.SOCK_STREAM, 0)),
        "a connect": ("socket.connect", (None, ("10.0.0.1", 80))),
        "a fork": ("os.fork", ()),
        "a signal": ("os.kill", (os.getppid(), 9)),
    }
    for what, (event, args) in refused.items():
        with pytest.raises(PermissionError, match="sandbox: "):
            wall(event, args)
        assert wall.report.refused, what
    with wall.judge_phase():  # the judge compiling its baselines: its caches open
        wall("open", (str(cache / "fx.bin"), "wb", 0))
    assert len(wall.report.refused) == len(refused)
