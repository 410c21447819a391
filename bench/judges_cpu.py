"""A search's judging wall time with one judge and with two, on the CPU: `yantra up --judges N` as it runs.

    python bench/judges_cpu.py                      # 1 and 2 judges, 8 candidates (4 search steps of 2), 2 repeats
    python bench/judges_cpu.py --candidates 12 --repeats 3 --out bench/results/judges_cpu.json
    python bench/judges_cpu.py --device cuda        # the same on a GPU box: each judge on a GPU of its own

For each number of judges: an embedded nats-server, the coder and N judge processes started as `yantra up` starts
them (services.core.stack.start_stack, YANTRA_DEVICE=cpu: every candidate runs in the Triton interpreter), a warm-up
search of two candidates (each judge's zygote started), then `--repeats` runs of one search over a live
Qwen2RMSNorm's profile (the coder proposes two candidates a step and decides the next step from both verdicts).
A run's judging wall time is its search's: from the first CandidateProposed to the TargetConcluded, by the
envelopes' times (the coder's share is milliseconds); its judge-seconds are the sum of the verdicts' own
`observed.wall_s`, so judge-seconds / wall says how many judges worked at once. Printed, and written with --out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from transformers.models.qwen2.modeling_qwen2 import Qwen2RMSNorm  # noqa: E402

from services.core import events as ev  # noqa: E402
from services.core.bus import Bus  # noqa: E402
from services.core.nats_launcher import start_nats  # noqa: E402
from services.core.pb import events_pb2 as pb  # noqa: E402
from services.core.settings import Settings  # noqa: E402
from services.core.stack import start_stack  # noqa: E402
from services.server.introspection import introspect_module  # noqa: E402

WIDTH, LIVE_SHAPE = 64, (2, 3, 64)  # tiny-qwen2's norm, as its profile records it
POLICY = pb.SwapPolicy(min_reward=1, name="cpu-untimed", reason="bench: no GPU, correct untimed kernels may swap")


def profile_captured() -> pb.ProfileCaptured:
    """A ProfileCaptured of a live Qwen2RMSNorm, as the profiler records one (what the coder and the judge read)."""
    intro = introspect_module(Qwen2RMSNorm(WIDTH, eps=1e-6))
    module = pb.ModuleClassProfile(introspection=intro, instances=3, calls=30, input_shape=LIVE_SHAPE,
                                   dtype="torch.float32")  # fmt: skip
    observed = pb.ProfileObservation(model="tiny-qwen2", dtype="torch.float32", modules=[module],
                                     hardware=pb.HardwareFigures(device="cpu"))  # fmt: skip
    fingerprint = pb.Fingerprint(op_family="row_reduction", row_width=WIDTH)
    ranked = pb.RankedTarget(class_path=intro.class_path, supported=True, fingerprint=fingerprint)
    return pb.ProfileCaptured(observed=observed, ranking=[ranked], target_class=intro.class_path)


async def _publish(bus: Bus, run_id: str, msg, cause: ev.Envelope | None, producer: str) -> ev.Envelope:
    env = ev.make_envelope(run_id, msg, producer=producer, time_ns=time.time_ns(),
                           causation_id=cause.event_id if cause else "")  # fmt: skip
    await bus.publish(env)
    return env


async def search(bus: Bus, candidates: int, timeout_s: float) -> list[ev.Recorded]:
    """One run's search (request, profile and skills published as the services would), its log once concluded."""
    run_id = "bench-" + uuid.uuid4().hex[:8]
    captured = profile_captured()
    request = await _publish(bus, run_id, pb.RunRequested(model="tiny-qwen2", policy=POLICY,
                                                          max_candidates=candidates), None, "bench")  # fmt: skip
    profile = await _publish(bus, run_id, captured, request, "profiler")
    await _publish(bus, run_id, pb.SkillsRetrieved(target_class=captured.target_class), profile, "skillstore")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        log = await bus.read_run(run_id)
        if ev.last(log, "TargetConcluded") is not None:
            return log
        await asyncio.sleep(0.2)
    raise SystemExit(f"run {run_id} did not conclude within {timeout_s:g} s")


def figures(log: list[ev.Recorded]) -> dict:
    """The search's judging wall time, its judge-seconds and who judged what."""
    proposed = ev.all_of(log, "CandidateProposed")
    judged = [r.msg for r in ev.all_of(log, "CandidateJudged")]
    wall = (ev.last(log, "TargetConcluded").env.time_unix_ns - proposed[0].env.time_unix_ns) / 1e9
    work = sum(j.observed.wall_s for j in judged)
    by_judge: dict[str, int] = {}
    for j in judged:
        where = f"{j.observed.judge_id} on {j.observed.device}"
        by_judge[where] = by_judge.get(where, 0) + 1
    return {"wall_s": round(wall, 2), "judge_s": round(work, 2), "candidates": len(judged), "by_judge": by_judge,
            "rewards": [j.reward for j in judged]}  # fmt: skip


async def _wait_ready(stack, names: list[str], timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        dead = stack.dead()
        if dead:
            raise SystemExit(f"{dead} exited: {stack.log_tail(dead[0][0])}")
        tails = {name: stack.log_tail(name, 200) for name in names}
        if all("judges on" in tails[n] or "connected to" in tails[n] for n in names):
            return
        await asyncio.sleep(0.5)
    raise SystemExit(f"{names} not ready within {timeout_s:g} s")


async def measure(judges: int, candidates: int, repeats: int, work: Path, device: str) -> list[dict]:
    nats = start_nats(work / f"nats-{judges}", log_file=work / f"nats-{judges}.log")
    settings = Settings(nats_url=nats.url, data_dir=work / f"data-{judges}", device=device, log_level="INFO")
    stack = start_stack(settings, ("coder", "judge"), judges=judges)  # on cuda: a GPU each, round-robin
    try:
        await _wait_ready(stack, list(stack.procs))
        bus = await Bus.connect(nats.url, name="bench-judges")
        try:
            await asyncio.sleep(2.0)  # every judge's pull on the durable in place
            warm = figures(await search(bus, 2, 600))  # each judge's zygote started (two judges: one each)
            print(f"{judges} judge(s): warm-up {warm['wall_s']} s {warm['by_judge']}", flush=True)
            runs = []
            for i in range(repeats):
                load = os.getloadavg()[0]  # what else the host ran meanwhile: a busy host stretches both figures
                run = figures(await search(bus, candidates, 1800))
                run["load_1min"] = [round(load, 2), round(os.getloadavg()[0], 2)]
                print(f"{judges} judge(s), run {i + 1}: {run}", flush=True)
                runs.append(run)
            return runs
        finally:
            await bus.close()
    finally:
        stack.stop()
        nats.stop()


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--candidates", type=int, default=8, help="candidates a search judges (2 a step)")
    parser.add_argument("--repeats", type=int, default=2, help="searches measured per number of judges")
    parser.add_argument("--out", type=Path, help="write the figures as JSON")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the judges judge")
    args = parser.parse_args()
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # the judges (and their sandboxed children) run the interpreter
    if args.candidates < 2 or args.repeats < 1:
        parser.error("--candidates must be 2 or more, --repeats 1 or more")
    results = {}
    with tempfile.TemporaryDirectory(prefix="yantra-bench-judges-") as tmp:
        for judges in (1, 2):
            results[judges] = await measure(judges, args.candidates, args.repeats, Path(tmp), args.device)
    one, two = (statistics.median(r["wall_s"] for r in results[n]) for n in (1, 2))
    where = f"the CPU ({os.cpu_count()} cores)" if args.device == "cpu" else "GPUs"
    print(f"judging wall time of a {args.candidates}-candidate search on {where}: "
          f"1 judge {one:.1f} s, 2 judges {two:.1f} s (median of {args.repeats}): x{one / two:.2f}")  # fmt: skip
    if args.out:
        report = {
            "command": "python bench/judges_cpu.py " + " ".join(sys.argv[1:]),
            "host": {"cpus": os.cpu_count(), "machine": platform.machine(), "python": platform.python_version()},
            "device": args.device,
            "candidates": args.candidates,
            "runs": {f"judges_{n}": results[n] for n in (1, 2)},
            "median_wall_s": {"judges_1": one, "judges_2": two},
            "speedup": round(one / two, 2),
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")
        print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
