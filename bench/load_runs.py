"""Many runs queued on one stack at once: none lost, each ends with exactly one terminal event (issue 30, item 5).

  python bench/load_runs.py [--runs 100] [--parallel 8] [--wait-s 1500] [--model tiny-qwen2] [--device cpu]

  1. `yantra up` on a fresh temporary data dir (the tiny preset on the CPU by default), a free server port of its own
  2. --runs runs queued as a user queues them, `yantra optimize --no-wait`, --parallel commands at a time; each run as
     small as the CLI allows (one target, one candidate, one short prompt, one decode token, one served-load level)
     and with a swap threshold no CPU verdict reaches (--min-reward 3: rewards there are capped at +1), so every run
     meets the same eager model and none waits on an interpreted kernel another run swapped in
  3. waits until every queued run has a terminal event (RunCompleted, RunFailed, RunCancelled), --wait-s passes, or
     no event lands in the log for --stall-s (a service stuck: each durable's pending and in-progress counts say which)
  4. tallies the log: completed (by outcome), failed (by reason), lost (no terminal event: where each stopped),
     duplicates (more than one terminal event), events stored twice (one event id, two sequences), answers beyond
     what their handler owed, latency queued -> terminal (the RunRequested's time to the terminal event's), dead
     letters, the streams' bytes, services the supervisor restarted, and the load average around it all
  5. stops the stack, always (an error, a timeout, SIGTERM)

Writes bench/results/load_<runs>_runs_<device>.json, with the command that made it, after the tally and again after
the stack stopped. Exit status 1 when a run was lost or ended twice, or an event was stored twice.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from services.core import events as ev  # noqa: E402
from services.core.bus import Bus  # noqa: E402
from services.core.nats_launcher import die_with_parent  # noqa: E402
from services.core.server_client import ServerUnavailable, wait_ready  # noqa: E402
from services.core.stack import running_stack  # noqa: E402
from services.registry import SERVICES  # noqa: E402

# The smallest run `yantra optimize` asks for (see step 2 above).
RUN_ARGS = ["--max-candidates", "1", "--max-targets", "1", "--min-reward", "3", "--prompt", "hi",
            "--decode-tokens", "1", "--served-streams", "1"]  # fmt: skip
QUEUED = re.compile(r"^run (\S+): ", re.M)


class Stopped(Exception):
    """SIGTERM: the stack is stopped and what was measured written."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def percentile(values: list[float], q: float) -> float | None:
    """Nearest rank: the smallest value with at least q of them at or below it (p99 of 100 is the 99th)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def tally(queued: list[str], log: list[ev.Recorded]) -> dict:
    """What became of each queued run, from the whole run log (pure)."""
    by_run: dict[str, list[ev.Recorded]] = {}
    for rec in log:
        by_run.setdefault(rec.env.run_id, []).append(rec)
    outcomes, reasons, latencies, requested, finished = Counter(), Counter(), [], [], []
    lost, duplicates, cancelled = [], [], 0
    for run in queued:
        events = by_run.get(run, [])
        ends = [r for r in events if r.type in ev.TERMINAL_EVENTS]
        if not ends:
            lost.append({"run": run, "events": len(events), "last": events[-1].type if events else "nothing stored"})
            continue
        if len(ends) > 1:
            duplicates.append({"run": run, "terminal": [r.type for r in ends]})
        end = ends[0]
        if end.type == "RunCompleted":
            outcomes[end.msg.outcome] += 1
        elif end.type == "RunFailed":
            reasons[end.msg.reason[:300]] += 1
        else:
            cancelled += 1
        request = next((r for r in events if r.type == "RunRequested"), None)
        finished.append(end.env.time_unix_ns)
        if request is not None:
            requested.append(request.env.time_unix_ns)
            latencies.append((end.env.time_unix_ns - request.env.time_unix_ns) / 1e9)
    ids = Counter(r.env.event_id for r in log)
    # Every trigger answered as often as its handler gave answers (a search step gives two), as tests/e2e check.
    answers = Counter((r.env.causation_id, r.env.producer) for r in log if r.env.causation_id)
    owed = {(r.env.causation_id, r.env.producer): r.env.answers or 1 for r in log if r.env.causation_id}
    mine = [by_run.get(run, []) for run in queued]
    return {
        "completed": sum(outcomes.values()),
        "completed_outcomes": dict(outcomes),
        "failed": sum(reasons.values()),
        "failed_reasons": dict(reasons),
        "cancelled": cancelled,
        "lost": len(lost),
        "lost_runs": lost,
        "duplicates": len(duplicates),
        "duplicate_runs": duplicates,
        "events_stored_twice": sum(n - 1 for n in ids.values() if n > 1),
        "answers_beyond_owed": sum(max(0, n - owed[key]) for key, n in answers.items()),
        # the first run queued to the last run ended, by the events' own times
        "span_s": round((max(finished) - min(requested)) / 1e9, 1) if finished and requested else None,
        "events": sum(len(events) for events in mine),
        "events_per_run": round(sum(len(events) for events in mine) / max(1, len(queued)), 1),
        "latency_s": {
            "p50": _round(percentile(latencies, 0.50)),
            "p99": _round(percentile(latencies, 0.99)),
            "min": _round(min(latencies, default=None)),
            "max": _round(max(latencies, default=None)),
        },
        "latencies_s": sorted(round(x, 1) for x in latencies),
    }


async def consumers(bus: Bus) -> dict:
    """Each service's durable: messages not yet handed out, handed out and not acknowledged (in progress), handed out
    again; a service stuck on one message shows it in progress with everything behind it pending."""
    out = {}
    for name in SERVICES:
        try:
            info = await bus.js.consumer_info(ev.RUNS_STREAM, name)
        except Exception as exc:  # a service that never made its durable
            out[name] = {"error": str(exc) or type(exc).__name__}
            continue
        out[name] = {"pending": info.num_pending, "in_progress": info.num_ack_pending,
                     "redelivered": info.num_redelivered, "acked_through_seq": info.ack_floor.stream_seq}  # fmt: skip
    return out


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def _stopped(*_) -> None:
    raise Stopped()


class Load:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.data = Path(tempfile.mkdtemp(prefix="yantra-load-"))
        self.addr = f"127.0.0.1:{free_port()}"
        self.env = {**os.environ, "YANTRA_SERVER_ADDR": self.addr, "PYTHONUNBUFFERED": "1"}
        self.up: subprocess.Popen | None = None
        self.path = Path(args.out) / f"load_{args.runs}_runs_{args.device}.json"
        self.loads: list[float] = []
        self.result: dict = {
            "command": "python bench/load_runs.py " + shlex.join(sys.argv[1:]),
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "model": args.model,
            "device": args.device,
            "run_args": RUN_ARGS,
            "parallel_cli": args.parallel,
            "wait_s": args.wait_s,
            "machine": {"cpus": os.cpu_count(), "load_avg_before": [round(x, 2) for x in os.getloadavg()]},
        }

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.result, indent=2) + "\n")

    def scrub(self, text: str) -> str:
        """No path of this machine in the result: the temporary data dir is <data>."""
        return text.replace(str(self.data), "<data>")

    # ------------------------------------------------------------------ the stack

    def start(self) -> str:
        a = self.args
        argv = [sys.executable, "-m", "services.cli", "up", "--data-dir", str(self.data), "--model", a.model,
                "--device", a.device]  # fmt: skip
        # its own group (stopped as one), and it dies with this process even when this one is killed outright
        log = open(self.data / "up.log", "wb")  # noqa: SIM115 (the child holds it)
        self.up = subprocess.Popen(
            argv, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=die_with_parent,
        )  # fmt: skip
        t0 = time.monotonic()
        while time.monotonic() - t0 < a.ready_s:
            if self.up.poll() is not None:
                raise RuntimeError(f"yantra up exited with {self.up.returncode}: {self.tail('up.log')}")
            info = running_stack(self.data)
            if info and info.get("instance_id"):
                try:
                    asyncio.run(wait_ready(self.addr, timeout=max(1.0, a.ready_s - (time.monotonic() - t0))))
                except ServerUnavailable as exc:
                    raise RuntimeError(f"the server never got ready: {exc}") from exc
                self.result["ready_s"] = round(time.monotonic() - t0, 1)
                return info["nats_url"]
            time.sleep(1.0)
        raise RuntimeError(f"the stack was not up after {a.ready_s:g} s: {self.tail('up.log')}")

    def tail(self, name: str, lines: int = 20) -> str:
        try:
            text = (self.data / name).read_text(errors="replace")
        except OSError:
            return ""
        return self.scrub("\n".join(text.splitlines()[-lines:]))

    def stop(self) -> None:
        up, self.up = self.up, None
        if up is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(up.pid, signal.SIGTERM)  # `yantra up` stops the services in order
        try:
            up.wait(timeout=60)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(up.pid, signal.SIGKILL)
            up.wait()
        log = (self.data / "up.log").read_text(errors="replace") if (self.data / "up.log").exists() else ""
        # The supervisor says "<what> exited with N; restarting it" each time it starts one again.
        self.result["service_restarts"] = log.count("; restarting it")
        self.result["stack_stopped"] = running_stack(self.data) is None

    # ------------------------------------------------------------------ queueing and waiting

    async def queue_one(self, gate: asyncio.Semaphore) -> tuple[str, str]:
        """(run id, "") once `yantra optimize --no-wait` queued a run; ("", why) when it did not."""
        argv = [sys.executable, "-m", "services.cli", "optimize", "--data-dir", str(self.data), *RUN_ARGS, "--no-wait"]
        async with gate:
            proc = await asyncio.create_subprocess_exec(
                *argv, cwd=ROOT, env=self.env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
            )
            out, err = await proc.communicate()
        found = QUEUED.search(out.decode(errors="replace"))
        if proc.returncode == 0 and found:
            return found.group(1), ""
        return "", self.scrub(f"exit {proc.returncode}: {err.decode(errors='replace').strip()[-300:]}")

    async def measure(self, url: str) -> None:
        a = self.args
        bus = await Bus.connect(url, name="load-bench")
        try:
            t0 = time.monotonic()
            gate = asyncio.Semaphore(a.parallel)
            tried = await asyncio.gather(*(self.queue_one(gate) for _ in range(a.runs)))
            queued = [run for run, _ in tried if run]
            self.result["queue_s"] = round(time.monotonic() - t0, 1)
            self.result["runs_queued"] = len(queued)
            self.result["queue_failures"] = dict(Counter(why for run, why in tried if not run))
            print(f"[{time.monotonic() - t0:6.1f}s] queued {len(queued)} of {a.runs} runs", flush=True)

            ended: set[str] = set()
            last_seq, moved = -1, time.monotonic()
            while time.monotonic() - t0 < a.wait_s:
                seq = (await bus.js.stream_info(ev.RUNS_STREAM)).state.last_seq
                if seq != last_seq:
                    last_seq, moved = seq, time.monotonic()
                elif time.monotonic() - moved > a.stall_s:  # nothing landed for that long: a service is stuck
                    self.result["stalled"] = f"no event landed in the log for {a.stall_s:g} s; stopped waiting"
                    print(f"[{time.monotonic() - t0:6.1f}s] {self.result['stalled']}", flush=True)
                    break
                ends = []
                for kind in ev.TERMINAL_EVENTS:
                    ends += await bus.read_all(ev.run_filter("*", kind))
                ended = {r.env.run_id for r in ends} & set(queued)
                self.loads.append(os.getloadavg()[0])
                print(f"[{time.monotonic() - t0:6.1f}s] {len(ended)} of {len(queued)} runs ended", flush=True)
                if len(ended) == len(queued):
                    break
                await asyncio.sleep(a.poll_s)
            self.result["wall_s"] = round(time.monotonic() - t0, 1)
            self.result["all_ended"] = len(ended) == len(queued)
            await asyncio.sleep(3.0)  # a second terminal event of a run would land about now
            log = await bus.read_all()
            self.result |= tally(queued, log)
            span = self.result["span_s"] or self.result["wall_s"]
            self.result["runs_per_min"] = round(60 * len(ended) / max(span, 1e-9), 2)
            self.result["dead_letters"] = await bus.dead_letter_count()
            self.result["consumers"] = await consumers(bus)
            self.result["streams"] = {}
            for name in (ev.RUNS_STREAM, ev.DLQ_STREAM):
                state = (await bus.js.stream_info(name)).state
                self.result["streams"][name] = {"bytes": state.bytes, "messages": state.messages}
        finally:
            await bus.close()

    def run(self) -> int:
        signal.signal(signal.SIGTERM, _stopped)
        try:
            url = self.start()
            print(f"stack ready in {self.result['ready_s']} s; queueing {self.args.runs} runs", flush=True)
            asyncio.run(self.measure(url))
        except (Stopped, KeyboardInterrupt):
            self.result["error"] = "stopped by a signal before the end"
        except Exception as exc:  # written down with what was measured so far
            self.result["error"] = self.scrub(f"{type(exc).__name__}: {exc}")
        finally:
            self.result["machine"]["load_avg_after"] = [round(x, 2) for x in os.getloadavg()]
            self.result["machine"]["load_avg_1m_max_during"] = round(max(self.loads, default=0.0), 2)
            self.write()
            self.stop()
            self.write()
        r = self.result
        bad = r.get("error") or r.get("lost") or r.get("duplicates") or r.get("events_stored_twice")
        shown = (
            "runs_queued",
            "completed",
            "failed",
            "lost",
            "duplicates",
            "events_stored_twice",
            "wall_s",
            "latency_s",
        )
        print(json.dumps({k: r.get(k) for k in (*shown, "dead_letters")}))
        print(f"wrote {self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path}")
        if bad:  # the services' logs say what happened
            print(f"kept the stack's data dir and logs: {self.data}")
        else:
            shutil.rmtree(self.data, ignore_errors=True)
        return 1 if bad or r.get("lost") is None else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=100, help="runs to queue (default %(default)s)")
    p.add_argument(
        "--parallel", type=int, default=8, help="`yantra optimize --no-wait` at a time (default %(default)s)"
    )
    p.add_argument("--wait-s", type=float, default=1500, help="seconds from the first queued to give up waiting")
    p.add_argument("--ready-s", type=float, default=300, help="seconds the stack has to get ready")
    p.add_argument("--stall-s", type=float, default=300, help="stop waiting once no event lands for this long")
    p.add_argument("--poll-s", type=float, default=10, help="seconds between two looks at the log")
    p.add_argument("--model", default="tiny-qwen2")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = p.parse_args()
    if args.runs < 1 or args.parallel < 1:
        p.error("--runs and --parallel must be at least 1")
    return Load(args).run()


if __name__ == "__main__":
    raise SystemExit(main())
