"""Sandbox children forked from the zygote (services.judge.zygote): the zygote imports torch, Triton and
transformers once, each child is what a fresh `python -m services.judge.sandbox_child` was — its own session,
only its own descriptors, its walls — and a zygote that died is started again; switched off, the sandbox starts
each child itself."""

from __future__ import annotations

import os
from pathlib import Path

from judge_testkit import honest_source, prepared, run_prepared

from services.judge import zygote_client
from services.judge.sandbox import SandboxLimits

LIMITS = SandboxLimits(timeout_s=120)


def _children(zygote_pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{zygote_pid}/task/{zygote_pid}/children").read_text().split()]


def _passed(outcome, tally) -> bool:
    return bool(outcome.facts.get("loaded")) and not tally.error and outcome.sandbox.exit == "code 0"


async def test_a_forked_child_holds_only_its_own_descriptors_and_session(tmp_path):
    seen = {}

    def look():
        zygote = zygote_client._ZYGOTES[False]
        [child] = _children(zygote.proc.pid)
        fds = sorted(int(fd) for fd in os.listdir(f"/proc/{child}/fd"))
        targets = {fd: os.readlink(f"/proc/{child}/fd/{fd}") for fd in fds}
        stat = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()
        seen.update(child=child, targets=targets, session=int(stat[3]), cwd=os.readlink(f"/proc/{child}/cwd"))

    ready = prepared(honest_source())
    outcome, tally = await run_prepared(ready, LIMITS, tmp_path, while_waiting=look)
    assert _passed(outcome, tally), (outcome.facts, outcome.log_tail)
    assert seen["session"] == seen["child"]  # a session of its own: the judge kills its group on a timeout
    assert seen["cwd"].startswith(str(tmp_path))  # its own scratch
    # stdin (a pipe), the log twice, the answer (an unlinked file), and whatever the child opened itself after
    # its walls (files of its scratch, torch's); no socket: the zygote's is not reachable
    sockets = [t for t in seen["targets"].values() if t.startswith("socket:")]
    assert not sockets, seen["targets"]
    assert seen["targets"][1] == seen["targets"][2] and seen["targets"][1].endswith("child.log")
    assert seen["targets"][0].startswith("pipe:") and seen["targets"][3].endswith("(deleted)")
    pipes = [fd for fd, target in seen["targets"].items() if target.startswith("pipe:")]
    # stdin, and the go-ahead pipe (4) until the child closes it after its one byte (we look as that byte lands);
    # none of the zygote's (its signal pipe sat just above its socket)
    assert set(pipes) <= {0, 4}, seen["targets"]
    assert outcome.sandbox.network in ("netns", "audit-hook") and any("audit hook" in w for w in outcome.sandbox.walls)


async def test_a_dead_zygote_is_started_again_and_switched_off_children_start_afresh(tmp_path):
    ready = prepared(honest_source())
    assert _passed(*await run_prepared(ready, LIMITS, tmp_path))
    first = zygote_client._ZYGOTES[False]
    first.proc.kill()
    first.proc.wait()
    assert _passed(*await run_prepared(prepared(honest_source()), LIMITS, tmp_path))
    second = zygote_client._ZYGOTES[False]
    assert second is not first and second.alive and not first.alive
    # switched off: a child of the judge's own (not a child of the zygote)
    off = SandboxLimits(timeout_s=120, zygote=False)
    pids = []

    def look():
        pids.extend(_children(os.getpid()))

    assert _passed(*await run_prepared(prepared(honest_source()), off, tmp_path, while_waiting=look))
    assert second.proc.pid in pids and len(pids) >= 2  # the zygote and the child, both the judge's children
