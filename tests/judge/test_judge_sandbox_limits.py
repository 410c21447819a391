"""The sandbox's walls: a runaway candidate is killed with its process group, secrets do not cross."""

from __future__ import annotations

import ast
import asyncio
import os
import time
from pathlib import Path

from judge_testkit import honest_source, sandbox_job

from services.judge.sandbox import PASSTHROUGH_ENV, SandboxLimits, run_job


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in state  # a zombie waiting for its reaper has stopped running


async def test_a_runaway_candidate_and_its_children_are_killed_on_timeout(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    runaway = honest_source() + (
        "\nimport subprocess\n"
        f"_child = subprocess.Popen(['sleep', '300'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(_child.pid))\n"
        "while True:\n    pass\n"
    )
    started = time.monotonic()
    outcome = await run_job(sandbox_job(runaway), SandboxLimits(timeout_s=6), use_gpu=False, scratch_parent=tmp_path)
    assert time.monotonic() - started < 15
    assert not outcome.correctness.passed and outcome.correctness.error == "killed after the 6 s timeout"
    assert outcome.timing.reason == "the sandbox timed out"
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while _alive(grandchild) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert not _alive(grandchild)


async def test_the_child_cannot_read_the_judges_secrets(tmp_path, monkeypatch):
    monkeypatch.setenv("YANTRA_TEST_API_KEY", "sk-very-secret")
    snoop = honest_source() + (
        "\nimport os\nraise RuntimeError('ENV ' + repr(sorted(os.environ.items())) + ' CWD ' + os.getcwd())\n"
    )
    outcome = await run_job(sandbox_job(snoop), SandboxLimits(timeout_s=60), use_gpu=False, scratch_parent=tmp_path)
    error = outcome.correctness.error
    assert "candidate does not import: RuntimeError: ENV" in error
    assert "sk-very-secret" not in error and "YANTRA_TEST_API_KEY" not in error
    env = dict(ast.literal_eval(error.split("ENV ", 1)[1].split(" CWD ", 1)[0]))
    scratch = error.rsplit(" CWD ", 1)[1]
    assert env["HOME"] == scratch and Path(scratch).parent == tmp_path
    assert env["TRITON_CACHE_DIR"].startswith(scratch) and env["TRITON_INTERPRET"] == "1"
    assert env["PYTHONPATH"] == str(Path(__file__).resolve().parents[2])
    # LC_CTYPE: Python itself coerces the C locale at start-up (PEP 538)
    allowed = {"HOME", "PYTHONPATH", "TRITON_CACHE_DIR", "TRITON_INTERPRET", "LC_CTYPE", *PASSTHROUGH_ENV}
    assert set(env) <= allowed, set(env) - allowed
    assert os.environ["YANTRA_TEST_API_KEY"] == "sk-very-secret"
