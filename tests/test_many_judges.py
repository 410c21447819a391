"""Many judges on one durable consumer: `yantra up --judges N` plans N judge processes (an id each, a GPU each where
there are GPUs), a search step's candidates are judged by different judges at once over a real nats-server, every
candidate gets exactly one verdict, and each verdict records its judge and device."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest
from runlog import publish_envelope, wait_for_events

from services.cli.common import CliError
from services.cli.stack_cmds import judges_of
from services.coder import domain as coder_domain
from services.coder.service import CoderService
from services.core import events as ev
from services.core.launches import Launch, LaunchError, judges_notice, plan_launches, visible_gpus
from services.core.pb import events_pb2 as pb
from services.core.replay import verify
from services.core.settings import Settings
from services.core.stack import StackError, start_stack
from services.judge import domain as judge_domain
from services.judge.identity import BadJudgeId, device_label, judge_id
from services.judge.report import describe
from services.judge.service import JudgeService

JUDGE_KIT = str(Path(__file__).resolve().parent / "judge")  # the judge's test kit, as tests/ops/conftest.py adds it
if JUDGE_KIT not in sys.path:
    sys.path.append(JUDGE_KIT)

from judge_testkit import profile_captured, qwen_norm, serving  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
REDERIVE = {**coder_domain.REDERIVE, **judge_domain.REDERIVE}
CPU_POLICY = pb.SwapPolicy(min_reward=1, name="cpu-untimed", reason="test: no GPU, correct untimed kernels may swap")
SERVICES = ("server", "profiler", "skillstore", "coder", "judge")


# ------------------------------------------------------------------ the plan (pure)


def _env(launch: Launch) -> dict[str, str]:
    return dict(launch.env)


def test_one_judge_keeps_its_name_and_takes_the_first_gpu():
    launches = plan_launches(SERVICES, 1, ())
    assert [launch.name for launch in launches] == list(SERVICES)
    assert _env(launches[-1]) == {"YANTRA_JUDGE_ID": "judge"} and launches[-1].service == "judge"
    assert all(not launch.env for launch in launches[:-1])  # the other services run as they always did
    assert _env(plan_launches(SERVICES, 1, ("0", "1"))[-1])["CUDA_VISIBLE_DEVICES"] == "0"
    assert judges_notice(launches) is None


def test_judges_are_named_and_pinned_round_robin_over_the_gpus():
    launches = plan_launches(SERVICES, 3, ("0", "1"))
    judges = [launch for launch in launches if launch.service == "judge"]
    assert [j.name for j in judges] == ["judge-1", "judge-2", "judge-3"]
    assert [_env(j)["YANTRA_JUDGE_ID"] for j in judges] == ["judge-1", "judge-2", "judge-3"]
    assert [_env(j)["CUDA_VISIBLE_DEVICES"] for j in judges] == ["0", "1", "0"]
    four = plan_launches(("judge",), 4, ("GPU-aa", "GPU-bb", "GPU-cc", "GPU-dd"))  # UUIDs as the user gave them
    assert [_env(j)["CUDA_VISIBLE_DEVICES"] for j in four] == ["GPU-aa", "GPU-bb", "GPU-cc", "GPU-dd"]
    assert judges_notice(launches) == (
        "3 judges share the durable consumer 'judge': judge-1 on GPU 0, judge-2 on GPU 1, judge-3 on GPU 0"
    )
    on_cpu = plan_launches(("coder", "judge"), 2, ())
    assert all("CUDA_VISIBLE_DEVICES" not in _env(j) for j in on_cpu)
    assert judges_notice(on_cpu).endswith("judge-1, judge-2 (no GPU: each judges on the CPU)")


@pytest.mark.parametrize("judges", [0, -1, 65])
def test_a_number_of_judges_out_of_range_is_refused(judges):
    with pytest.raises(LaunchError, match="number of judges must be 1 to 64"):
        plan_launches(SERVICES, judges, ())


def test_start_stack_refuses_a_bad_number_of_judges_before_anything_starts(tmp_path):
    with pytest.raises(StackError, match="number of judges"):
        start_stack(Settings(data_dir=tmp_path / "data", device="cpu"), ("judge",), judges=0)
    assert not (tmp_path / "data").exists()


def test_visible_gpus_reads_the_users_list_and_nvidia_smi(tmp_path, monkeypatch):
    assert visible_gpus("cpu", {"CUDA_VISIBLE_DEVICES": "0,1"}) == ()
    assert visible_gpus("auto", {"CUDA_VISIBLE_DEVICES": "2, 3"}) == ("2", "3")
    assert visible_gpus("cuda", {"CUDA_VISIBLE_DEVICES": ""}) == ()
    assert visible_gpus("cuda", {"CUDA_VISIBLE_DEVICES": "-1"}) == ()
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi: no GPU to pin to
    assert visible_gpus("auto", {}) == ()
    smi = tmp_path / "nvidia-smi"  # what `nvidia-smi -L` prints on a two-GPU box
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-aa)'\necho 'GPU 1: NVIDIA H200 (UUID: GPU-bb)'\n")
    smi.chmod(0o755)
    assert visible_gpus("auto", {}) == ("0", "1")


def test_the_judges_id_and_device_label():
    assert judge_id("", "box7", 42) == "box7:42"  # a compose replica: its container's host name
    assert judge_id(" judge-2 ", "box7", 42) == "judge-2"
    for bad in ("two words", "x" * 65, "-lead", "a/b"):
        with pytest.raises(BadJudgeId) as refused:
            judge_id(bad, "box7", 42)
        assert "\n" not in str(refused.value) and "YANTRA_JUDGE_ID" in str(refused.value)
    assert device_label(False, "3") == "cpu"
    assert device_label(True, "3,1", "NVIDIA H200") == "cuda:3 NVIDIA H200"  # pinned: the host's index
    assert device_label(True, None, "NVIDIA H200") == "cuda:0 NVIDIA H200"


def test_judges_of_the_flag_the_environment_or_one():
    assert judges_of(None, {}) == 1
    assert judges_of(None, {"YANTRA_JUDGES": "3"}) == 3
    assert judges_of(2, {"YANTRA_JUDGES": "3"}) == 2
    for bad in ("two", "0", "65"):
        with pytest.raises(CliError) as refused:
            judges_of(None, {"YANTRA_JUDGES": bad})
        assert "YANTRA_JUDGES" in str(refused.value) and "\n" not in str(refused.value)


def _run(args: list[str], **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=120
    )


def test_bad_numbers_of_judges_and_a_bad_judge_id_are_one_line_errors(tmp_path):
    data = str(tmp_path / "data")
    flag = _run(["-m", "services.cli", "up", "--judges", "0", "--data-dir", data])
    assert flag.returncode == 2 and "--judges: 0 is outside 1..64" in flag.stderr, flag.stderr
    env = _run(["-m", "services.cli", "up", "--data-dir", data], YANTRA_JUDGES="many")
    assert env.returncode != 0 and "Traceback" not in env.stderr, env.stderr
    assert "YANTRA_JUDGES='many'" in env.stdout + env.stderr and not (tmp_path / "data" / "stack.json").exists()
    judge = _run(["-m", "services.judge"], YANTRA_JUDGE_ID="two words", NATS_URL="nats://127.0.0.1:1")
    assert judge.returncode == 2 and judge.stderr.strip().startswith("judge: cannot start: YANTRA_JUDGE_ID=")
    assert len(judge.stderr.strip().splitlines()) == 1, judge.stderr


# ------------------------------------------------------------------ two judges on one durable consumer, real nats


async def _search(bus, run_id: str, max_candidates: int):
    captured = profile_captured(qwen_norm())
    request = await publish_envelope(
        bus, run_id, pb.RunRequested(model="tiny-qwen2", policy=CPU_POLICY, max_candidates=max_candidates)
    )
    profile = await publish_envelope(bus, run_id, captured, request, producer="profiler")
    await publish_envelope(bus, run_id, pb.SkillsRetrieved(target_class=captured.target_class), profile, "skillstore")


def _check_one_verdict_each(log: list[ev.Recorded], judges: set[str]) -> list[pb.CandidateJudged]:
    proposed = [r.msg.candidate_id for r in ev.all_of(log, "CandidateProposed")]
    judged = [r.msg for r in ev.all_of(log, "CandidateJudged")]
    assert Counter(j.candidate_id for j in judged) == Counter(proposed), (proposed, [j.candidate_id for j in judged])
    assert all(r.env.producer == "judge" for r in ev.all_of(log, "CandidateJudged"))  # one service, many processes
    assert {j.observed.judge_id for j in judged} == judges, [j.observed.judge_id for j in judged]
    assert {j.observed.device for j in judged} == {"cpu"}
    assert [str(m) for m in verify(log, REDERIVE) if m.type in REDERIVE] == []
    return judged


async def test_two_judges_share_a_search_step_and_every_candidate_gets_one_verdict(bus, nats_server, run_id):
    """Two searches steps of two candidates: each step's two are judged by the two judges at once (each judge's
    sandbox child takes seconds, so the second candidate of a step finds the first judge busy), the step ends
    when both verdicts are in, and the run replays exactly."""
    judges = [JudgeService(device="cpu", judge_id=f"judge-{name}") for name in ("a", "b")]
    async with serving(nats_server.url, [CoderService(), *judges], run_id):  # the judges share one durable
        await _search(bus, run_id, max_candidates=4)
        [concluded] = await wait_for_events(bus, run_id, "TargetConcluded", timeout=180)
    log = await bus.read_run(run_id)
    judged = _check_one_verdict_each(log, {"judge-a", "judge-b"})
    assert len(judged) == 4 and concluded.msg.candidates_judged == 4
    for step in (judged[:2], judged[2:]):  # each step judged by both (the verdicts of a step land before the next)
        assert {j.observed.judge_id for j in step} == {"judge-a", "judge-b"}, [j.observed.judge_id for j in judged]
    assert "judged by judge-a on cpu" in describe(next(j for j in judged if j.observed.judge_id == "judge-a"))


@pytest.mark.slow
async def test_yantra_up_starts_two_judge_processes_that_share_the_work(own_nats, own_bus, tmp_path):
    """The stack as `yantra up --judges 2` starts it (the coder and two judge processes, their own logs), a run of
    four candidates judged by both, one verdict each."""
    settings = Settings(nats_url=own_nats.url, data_dir=tmp_path / "data", device="cpu", ack_wait_s=4.0)
    stack = start_stack(settings, ("coder", "judge"), judges=2, gpus=())
    try:
        assert list(stack.procs) == ["coder", "judge-1", "judge-2"]
        run_id = "two-" + uuid.uuid4().hex[:8]
        await _search(own_bus, run_id, max_candidates=4)
        await wait_for_events(own_bus, run_id, "TargetConcluded", timeout=300)
        log = await own_bus.read_run(run_id)
        _check_one_verdict_each(log, {"judge-1", "judge-2"})
        assert stack.dead() == []
        for name in ("judge-1", "judge-2"):
            assert f"judge {name} judges on cpu" in stack.log_tail(name, 400), stack.log_tail(name)
        # the supervisor restarts a judge by its name: the same id, service and log
        stack.procs["judge-2"].kill()
        stack.procs["judge-2"].wait()
        again = stack.start_service("judge-2")
        environ = dict(v.split("=", 1) for v in Path(f"/proc/{again.pid}/environ").read_text().split("\0") if "=" in v)
        assert environ["YANTRA_JUDGE_ID"] == "judge-2"  # and no GPU pinned on the CPU (gpus=()): the parent's own
        assert environ.get("CUDA_VISIBLE_DEVICES") == os.environ.get("CUDA_VISIBLE_DEVICES")
    finally:
        stack.stop()
