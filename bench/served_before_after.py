"""One served benchmark before and after a full optimisation run, on one machine, in one go:

  1. `yantra up` on a fresh data dir (the 1.5B-shaped preset on cuda by default), waited on until ready
  2. bench/served_load.py's concurrency sweep over gRPC (before)
  3. `yantra optimize`, waited on (cancelled when it outlasts its share of the budget)
  4. the same sweep again, the same requests (after)
  5. the stack stopped, always (also on an error, a timeout or SIGTERM)
  6. bench/served_inprocess.py (the engine driven in-process, and HF eager) at the same levels, when the time left
     allows; otherwise "in_process" is null with the reason

One result file, bench/results/served_<model>_<gpu>.json (+ .png), written after every step, so a run cut short
still leaves what it measured, and each step's failure is recorded in "steps" rather than stopping the others.

  python bench/served_before_after.py [--model qwen2.5-1.5b-shape] [--device cuda] [--budget-s 480]
  (scripts/served_before_after.sh runs it; `bash scripts/gpu_run.sh served` on the GPU machine)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import served_load  # noqa: E402

from services.core.nats_launcher import die_with_parent  # noqa: E402
from services.core.stack import running_stack  # noqa: E402

START = time.monotonic()


class Stopped(Exception):
    """SIGTERM (a caller's timeout): every step after it is skipped, the stack stopped, the result written."""


_HELD = re.compile(r"SwapCommitted\s+(\S+) .*?held the model ([\d.]+) s(?: \((.*)\))?$", re.M)


def swap_holds(output: str) -> list[dict]:
    """Each SwapCommitted line of `yantra optimize`'s output: the swap, its hold of the model in seconds and the
    hold's parts as the line gives them (services.core.describe)."""
    return [{"swap_id": m[1], "hold_s": float(m[2]), "parts": m[3] or ""} for m in _HELD.finditer(output)]


def left(budget: float) -> float:
    return budget - (time.monotonic() - START)


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gpu_name(device: str) -> str:
    """A short name of the GPU (h200) for the file name; the device itself when there is none."""
    if device != "cuda" or not shutil.which("nvidia-smi"):
        return device
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20).stdout.splitlines()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return device
    return re.sub(r"[^a-z0-9.-]+", "-", out[0].split()[-1].lower()) if out and out[0].strip() else device


class Run:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.data = Path(tempfile.mkdtemp(prefix="yantra-served-"))
        self.work = self.data / "bench"
        self.work.mkdir()
        self.addr = f"127.0.0.1:{args.port or free_port()}"
        self.env = {**os.environ, "YANTRA_SERVER_ADDR": self.addr, "PYTHONUNBUFFERED": "1"}
        self.up: subprocess.Popen | None = None
        self.out = Path(args.out)
        self.path = self.out / f"served_{args.model}_{gpu_name(args.device)}.json"
        self.result: dict = {
            "command": "bash scripts/served_before_after.sh " + shlex.join(sys.argv[1:]),
            "model": args.model,
            "device": args.device,
            "budget_s": args.budget_s,
            "sweep": self.sweep_args(),
            "steps": {},
            "before": None,
            "run": None,
            "after": None,
            "in_process": None,
        }

    # ------------------------------------------------------------------ bookkeeping

    def sweep_args(self) -> list[str]:
        a = self.args
        return ["--concurrency", *map(str, a.levels), "--per-stream", str(a.per_stream), "--input-len",
                str(a.input_len), "--output-len", str(a.output_len), "--input-spread", str(a.spread),
                "--output-spread", str(a.spread), "--slo-ttft-ms", str(a.slo_ttft_ms), "--slo-tpot-ms",
                str(a.slo_tpot_ms), "--seed", "0"]  # fmt: skip

    def step(self, name: str, ok: bool, **what) -> None:
        self.result["steps"][name] = {"ok": ok, "at_s": round(time.monotonic() - START, 1), **what}
        print(f"[{time.monotonic() - START:6.1f}s] {name}: {'ok' if ok else 'FAILED'} "
              f"{what.get('error', '') or what.get('note', '')}", flush=True)  # fmt: skip
        self.write()

    def write(self) -> None:
        r = self.result
        r["wall_s"] = round(time.monotonic() - START, 1)
        if r["before"] and r["after"]:
            r["after_vs_before_output_tokens_per_s"] = {
                str(b["concurrency"]): a["output_tokens_per_s"] / b["output_tokens_per_s"]
                for b, a in zip(r["before"]["levels"], r["after"]["levels"], strict=False)
                if b["output_tokens_per_s"] > 0
            }
        ip = r.get("in_process") or {}
        lanes = ip.get("lanes") or {}
        engine = {row["streams"]: row["tokens_per_s"] for row in lanes.get("engine", [])}
        same = {row["concurrency"]: row["output_tokens_per_s"] for row in lanes.get("engine_same_load", [])}
        # the stock engine in process against the stack before the run: like for like (the same load) first
        for key, inproc in (("", same), ("_fixed_lengths", engine)):
            if inproc and r["before"]:
                r[f"served_before_vs_in_process_engine{key}_tokens_per_s"] = {
                    str(b["concurrency"]): b["output_tokens_per_s"] / inproc[b["concurrency"]]
                    for b in r["before"]["levels"]
                    if inproc.get(b["concurrency"])
                }
        try:
            self.out.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".json.tmp")
            tmp.write_text(json.dumps(r, indent=2) + "\n")
            os.replace(tmp, self.path)
        except OSError as exc:
            print(f"cannot write {self.path}: {exc}", file=sys.stderr)

    def call(self, name: str, argv: list[str], timeout: float, log: Path) -> tuple[int | None, str]:
        """Run a child (own process group) with its output in `log`; (exit code or None on timeout, output tail)."""
        with open(log, "wb") as fh:
            proc = subprocess.Popen(argv, cwd=ROOT, env=self.env, stdout=fh, stderr=subprocess.STDOUT,
                                    start_new_session=True)  # fmt: skip
            try:
                code = proc.wait(timeout=max(1.0, timeout))
            except subprocess.TimeoutExpired:
                code = None
            except Stopped:
                self.kill_group(proc, grace=5)
                raise
            if code is None:
                self.kill_group(proc, grace=10)
        return code, tail(log, 20)

    @staticmethod
    def kill_group(proc: subprocess.Popen, grace: float) -> None:
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue

    # ------------------------------------------------------------------ the steps

    def start_stack(self) -> bool:
        a = self.args
        argv = [sys.executable, "-m", "services.cli", "up", "--data-dir", str(self.data), "--model", a.model,
                "--device", a.device]  # fmt: skip
        log = self.data / "up.log"
        # its own group (stopped as one), and it dies with this process even when this one is killed outright
        self.up = subprocess.Popen(argv, cwd=ROOT, env=self.env, stdout=open(log, "wb"), stderr=subprocess.STDOUT,  # noqa: SIM115
                                   start_new_session=True, preexec_fn=die_with_parent)  # fmt: skip
        t0 = time.monotonic()
        deadline = t0 + min(a.ready_s, left(a.budget_s) - 60)
        instance = ""
        while time.monotonic() < deadline:
            if self.up.poll() is not None:
                self.step("up", False, error=f"yantra up exited with {self.up.returncode}", log=tail(log))
                return False
            info = running_stack(self.data)
            instance = (info or {}).get("instance_id", "")
            if instance:
                try:
                    reply = asyncio.run(served_load.health(self.addr, os.environ.get("YANTRA_ADMIN_TOKEN", ""), 2.0))
                except served_load.LoadError:
                    reply = None
                if reply is not None and reply.instance_id == instance and reply.ready:
                    self.step("up", True, ready_s=round(time.monotonic() - t0, 1), addr=self.addr,
                              server={"model": reply.model, "device": reply.device, "dtype": reply.dtype})  # fmt: skip
                    return True
            time.sleep(1.0)
        self.step("up", False, error=f"not ready after {time.monotonic() - t0:.0f}s", log=tail(log),
                  server_log=tail(self.data / "logs" / "server.log"))  # fmt: skip
        return False

    def sweep(self, label: str, timeout: float) -> bool:
        argv = [sys.executable, "bench/served_load.py", "--server", self.addr, *self.sweep_args(), "--label", label,
                "--out", str(self.work), "--name", label, "--no-plot", "--wait-ready", "30"]  # fmt: skip
        code, out = self.call(f"sweep {label}", argv, timeout, self.work / f"{label}.log")
        path = self.work / f"{label}.json"
        if code == 0 and path.exists():
            self.result[label] = json.loads(path.read_text())
            self.step(f"sweep_{label}", True)
            return True
        why = "timed out" if code is None else f"exit {code}"
        self.step(f"sweep_{label}", False, error=f"served_load {why} after its {timeout:.0f}s", log=out)
        return False

    def optimize(self, timeout: float) -> bool:
        a = self.args
        wait = max(30, int(timeout) - 20)
        argv = [sys.executable, "-m", "services.cli", "optimize", "--data-dir", str(self.data), "--max-candidates",
                str(a.max_candidates), "--max-targets", str(a.max_targets), "--timeout", str(wait)]  # fmt: skip
        log = self.work / "optimize.log"
        t0 = time.monotonic()
        try:
            code, out = self.call("optimize", argv, wait + 15, log)
        except Stopped:  # what it had printed (its run id) is kept; the stack's stop ends the run
            self.result["run"] = {"run_id": self.run_id(log), "exit": None, "stopped": True, "output": tail(log, 20)}
            raise
        run_id = self.run_id(log)
        text = log.read_text(errors="replace") if log.exists() else ""
        end = re.search(rf"^run {re.escape(run_id)} (.+)$", text, re.M) if run_id else None
        self.result["run"] = {
            "run_id": run_id or None,
            "exit": code,
            "seconds": round(time.monotonic() - t0, 1),
            "max_candidates": a.max_candidates,
            "max_targets": a.max_targets,
            "outcome": end.group(1) if end and not end.group(1).startswith(":") else None,
            "output": out,
            # how long each swap held the model: a request arriving then waited that long (target 250 ms)
            "holds": swap_holds(text),
        }
        if code == 0:
            self.step("optimize", True, note=self.result["run"]["outcome"] or "")
            return True
        if run_id:  # still running in the stack (it outlasted the wait): cancel it, so "after" measures a quiet server
            c, _ = self.call("cancel", [sys.executable, "-m", "services.cli", "cancel", "--data-dir", str(self.data),
                                        run_id, "--reason", "served benchmark: out of time"], 30,
                             self.work / "cancel.log")  # fmt: skip
            self.result["run"]["cancelled"] = c == 0
        why = "timed out" if code is None else f"exit {code}"
        self.step("optimize", False, error=f"yantra optimize {why}", log=out)
        return False

    @staticmethod
    def run_id(log: Path) -> str:
        text = log.read_text(errors="replace") if log.exists() else ""
        found = re.search(r"^run (\S+): optimising", text, re.M)
        return found.group(1) if found else ""

    def stop_stack(self) -> None:
        if self.up is None:
            return
        up, self.up = self.up, None
        if up.poll() is None:
            self.kill_group(up, grace=45)  # SIGTERM: `yantra up` stops the services in order
        stopped = up.poll() is not None and running_stack(self.data) is None
        self.step("stop", stopped, exit=up.returncode, log=tail(self.data / "up.log", 6))

    def in_process(self) -> None:
        a = self.args
        room = left(a.budget_s) - 10
        if a.device != "cuda":
            self.result["in_process_reason"] = "bench/serving.py's lanes run on CUDA only"
            return
        if room < a.in_process_s:
            self.result["in_process_reason"] = (
                f"not run: {room:.0f}s of the budget left, it needs about {a.in_process_s:.0f}s (model load, the "
                "engine's graphs, HF eager at every level); run bench/served_inprocess.py on its own"
            )
            self.step("in_process", False, note="skipped, out of time")
            return
        out = self.work / "in_process.json"
        argv = [sys.executable, "bench/served_inprocess.py", "--model", a.model, "--streams", *map(str, a.levels),
                "--prompt-tokens", str(a.input_len), "--tokens", str(a.output_len), "--out", str(out),
                "--sweep", *self.sweep_args()]  # fmt: skip
        code, log = self.call("in_process", argv, room, self.work / "in_process.log")
        if code == 0 and out.exists():
            self.result["in_process"] = json.loads(out.read_text())
            self.result["in_process_reason"] = "run after the stack stopped, on the same GPU"
            self.step("in_process", True)
        else:
            why = "timed out" if code is None else f"exit {code}"
            self.result["in_process_reason"] = f"bench/served_inprocess.py {why}"
            self.step("in_process", False, error=why, log=log)

    def plot(self) -> None:
        note = served_load.plot(served_load.series_of(self.result), self.path.with_suffix(".png"),
                                served_load.title_of(self.result))  # fmt: skip
        self.result["plot"] = note
        print(note)
        self.write()

    def main(self) -> int:
        a = self.args
        print(f"served before/after: {a.model} on {a.device}, data dir {self.data}, result {self.path}", flush=True)
        self.write()
        try:
            if a.in_process == "first":
                self.in_process()
            if self.start_stack():
                swept = self.sweep("before", min(a.sweep_s, left(a.budget_s) - 30))
                # the run takes what is left but the second sweep, the stop and (when it fits) nothing more
                room = left(a.budget_s) - a.sweep_s - 50
                if room < 60:
                    self.step("optimize", False, error=f"only {room:.0f}s left for the run")
                else:
                    self.optimize(room)
                if swept or self.result["run"]:
                    self.sweep("after", min(a.sweep_s, left(a.budget_s) - 40))
        except Stopped:
            self.step("stopped", False, error="SIGTERM: the remaining steps were skipped")
        except Exception as exc:  # reported, and the stack stopped all the same
            self.step("error", False, error=f"{type(exc).__name__}: {exc}")
        finally:
            with contextlib.suppress(Stopped):
                self.stop_stack()
        if a.in_process == "last" and "stopped" not in self.result["steps"]:
            try:
                self.in_process()
            except Stopped:
                self.step("stopped", False, error="SIGTERM during the in-process lanes")
        if self.result["in_process"] is None and "in_process_reason" not in self.result:
            self.result["in_process_reason"] = "not asked (--in-process no)" if a.in_process == "no" else (
                "not run: an earlier step was stopped")  # fmt: skip
        self.plot()
        self.result["logs_dir"] = str(self.data)
        self.write()
        print(f"wrote {self.path}")
        ok = all(s["ok"] for k, s in self.result["steps"].items() if k != "in_process")
        return 0 if ok and self.result["before"] and self.result["after"] else 1


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="qwen2.5-1.5b-shape", help="preset `yantra up` serves (qwen2.5-1.5b-shape)")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--levels", type=int, nargs="+", default=[1, 16, 64], help="concurrent streams (1 16 64)")
    p.add_argument("--per-stream", type=int, default=3, help="requests each stream sends in a level (3)")
    p.add_argument("--input-len", type=int, default=64)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--spread", type=float, default=0.5, help="lengths uniform in mean·(1±spread) (0.5)")
    p.add_argument("--slo-ttft-ms", type=float, default=500.0)
    p.add_argument("--slo-tpot-ms", type=float, default=50.0)
    p.add_argument("--max-candidates", type=int, default=2, help="yantra optimize --max-candidates (2)")
    p.add_argument("--max-targets", type=int, default=0, help="yantra optimize --max-targets (0: every target)")
    p.add_argument("--budget-s", type=float, default=480.0, help="the whole script's time (480)")
    p.add_argument("--ready-s", type=float, default=180.0, help="most to wait for `yantra up` (180)")
    p.add_argument("--sweep-s", type=float, default=75.0, help="most one sweep may take (75)")
    p.add_argument("--in-process-s", type=float, default=100.0, help="time the in-process lanes need to start (100)")
    p.add_argument("--in-process", choices=["last", "first", "no"], default="last",
                   help="the in-process lanes after the stack stops (when the time left allows), before it starts, "
                   "or not at all (last)")  # fmt: skip
    p.add_argument("--port", type=int, default=0, help="the server's port (default: a free one)")
    p.add_argument("--out", default=str(ROOT / "bench" / "results"))
    return p


def main() -> int:
    args = parser().parse_args()

    def on_term(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: the clean-up must not be interrupted again
        raise Stopped()

    signal.signal(signal.SIGTERM, on_term)
    return Run(args).main()


if __name__ == "__main__":
    raise SystemExit(main())
