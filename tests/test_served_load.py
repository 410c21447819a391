"""bench/served_load.py: the pure serving metrics on known inputs, and one real run of the load generator over gRPC
against the live tiny model on CPU (two concurrency levels, a few short requests each)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
import os
import sys
from pathlib import Path

import grpc
import pytest

from services.core.pb import inference_pb2 as ipb
from services.core.pb import inference_pb2_grpc as igrpc
from services.server.engine import Engine
from services.server.grpc_api import start_grpc
from services.server.models import load_model

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


served_load = _load("served_load")  # puts bench/ on sys.path for its own `load_stats`
stats = sys.modules["load_stats"]  # the one served_load uses
Request = stats.Request


# ---------------------------------------------------------------------- the pure figures


def test_percentiles_interpolate_between_closest_ranks():
    values = list(range(1, 101))
    assert stats.percentile(values, 50) == pytest.approx(50.5)
    assert stats.percentile(values, 99) == pytest.approx(99.01)
    assert stats.percentile(values, 0) == 1 and stats.percentile(values, 100) == 100
    assert stats.percentile([3.0, 1.0, 2.0], 50) == 2.0  # order of the input does not matter
    assert stats.percentile([7.0], 99) == 7.0
    assert math.isnan(stats.percentile([], 50))
    with pytest.raises(ValueError):
        stats.percentile(values, 101)


def test_ttft_tpot_itl_and_e2e_of_one_request():
    r = Request(
        sent=1.0, input_tokens=5, asked_tokens=4, chunk_times=[1.1, 1.15, 1.25, 1.3], output_tokens=4, ended=1.3
    )
    assert r.ok
    assert stats.ttft(r) == pytest.approx(0.1)
    assert stats.e2e(r) == pytest.approx(0.3)
    assert stats.tpot(r) == pytest.approx(0.2 / 3)
    assert stats.itl(r) == pytest.approx([0.05, 0.1, 0.05])
    one = Request(sent=0.0, input_tokens=1, asked_tokens=1, chunk_times=[0.2], output_tokens=1, ended=0.2)
    assert stats.tpot(one) is None and stats.itl(one) == []
    # a chunk of several tokens: TPOT spreads the time over tokens, ITL counts the gap once
    multi = Request(sent=0.0, input_tokens=1, asked_tokens=5, chunk_times=[0.1, 0.5], output_tokens=5, ended=0.5)
    assert stats.tpot(multi) == pytest.approx(0.1) and stats.itl(multi) == pytest.approx([0.4])


def test_slo_needs_every_limit_and_a_completed_request():
    fast = Request(sent=0.0, input_tokens=2, asked_tokens=3, chunk_times=[0.1, 0.12, 0.14], output_tokens=3, ended=0.14)
    assert stats.meets_slo(fast) and stats.meets_slo(fast, ttft_ms=101, tpot_ms=21)
    assert not stats.meets_slo(fast, ttft_ms=99)
    assert not stats.meets_slo(fast, tpot_ms=19)
    failed = Request(sent=0.0, input_tokens=2, asked_tokens=3, error="UNAVAILABLE")
    short = Request(sent=0.0, input_tokens=2, asked_tokens=3, chunk_times=[0.1], output_tokens=1, ended=0.1)
    assert not failed.ok and not short.ok
    assert not stats.meets_slo(failed) and not stats.meets_slo(short)


def test_summary_counts_failures_and_reads_goodput_over_the_wall():
    good = Request(sent=0.0, input_tokens=10, asked_tokens=3, chunk_times=[0.1, 0.2, 0.3], output_tokens=3, ended=0.3)
    slow = Request(sent=0.5, input_tokens=20, asked_tokens=5, chunk_times=[1.5, 1.6, 1.7, 1.8, 1.9], output_tokens=5,
                   ended=1.9)  # fmt: skip
    failed = [Request(sent=0.1, input_tokens=4, asked_tokens=3, error="DEADLINE_EXCEEDED") for _ in range(2)]
    short = Request(sent=0.2, input_tokens=4, asked_tokens=3, chunk_times=[0.3], output_tokens=1, ended=0.3)
    s = stats.summarize([good, slow, *failed, short], wall_s=2.0, ttft_ms=500, tpot_ms=150)
    assert (s["requests"], s["completed"], s["failed"], s["incomplete"]) == (5, 2, 2, 1)
    assert s["errors"] == {"DEADLINE_EXCEEDED": 2}
    assert s["output_tokens"] == 8 and s["input_tokens"] == 30
    assert s["output_tokens_per_s"] == pytest.approx(4.0) and s["requests_per_s"] == pytest.approx(1.0)
    assert s["goodput_requests_per_s"] == pytest.approx(0.5)  # slow's first token took 1 s
    assert s["slo_met_fraction"] == pytest.approx(0.2)
    assert s["ttft_ms"]["p50"] == pytest.approx(550.0) and s["ttft_ms"]["max"] == pytest.approx(1000.0)
    assert s["tpot_ms"]["p50"] == pytest.approx(100.0)  # both requests: 100 ms a token after the first
    assert s["itl_ms"]["p99"] == pytest.approx(100.0) and s["e2e_ms"]["p99"] == pytest.approx(1389.0)
    empty = stats.summarize([], wall_s=1.0)
    assert empty["completed"] == 0 and empty["ttft_ms"]["p50"] is None
    with pytest.raises(ValueError):
        stats.summarize([good], wall_s=0)


def test_a_before_after_result_plots_every_lane_the_same_load_lane_by_its_levels():
    """The in-process lanes come in two shapes: bench/serving.py's rows by streams, and the engine driven with the
    sweep's own load (levels by concurrency, as a served sweep's); an H200 result holding both failed to plot."""
    level = {"concurrency": 16, "output_tokens_per_s": 2300.0, "ttft_ms": {"p50": 17.0, "p99": 80.0},
             "tpot_ms": {"p50": 6.0, "p99": 6.4}}  # fmt: skip
    row = {"streams": 16, "tokens_per_s": 2878.0, "ttft_s": 0.035}
    payload = {"before": {"levels": [level]}, "after": {"levels": [level]},
               "in_process": {"lanes": {"engine": [row], "engine_same_load": [level]}}}  # fmt: skip
    series = served_load.series_of(payload)
    assert set(series) == {"served, before", "served, after", "in-process engine", "in-process engine_same_load"}
    assert series["in-process engine_same_load"][0]["ttft_p99"] == 80.0
    assert series["in-process engine"][0] == {"x": 16, "tok_s": 2878.0, "ttft_p50": 35.0, "ttft_p99": None,
                                              "tpot_p50": None, "tpot_p99": None}  # fmt: skip


def test_requests_are_seeded_and_lengths_stay_in_their_range():
    argv = ["--concurrency", "2", "--per-stream", "1", "--input-len", "20", "--input-spread", "0.5",
            "--output-len", "8", "--output-spread", "0.25"]  # fmt: skip
    args = served_load.parser().parse_args(argv)
    a = [served_load.Specs(args, 512, "concurrency=2").next() for _ in range(1)]
    one, two = served_load.Specs(args, 512, "concurrency=2"), served_load.Specs(args, 512, "concurrency=2")
    drawn = [one.next() for _ in range(50)]
    assert drawn == [two.next() for _ in range(50)] and drawn[0] == a[0]
    assert drawn != [served_load.Specs(args, 512, "concurrency=3").next() for _ in range(50)]
    assert all(10 <= len(s.token_ids) <= 30 and 6 <= s.max_new_tokens <= 10 for s in drawn)
    assert all(64 <= t < 448 for s in drawn for t in s.token_ids)
    assert len({len(s.token_ids) for s in drawn}) > 1


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        ([], "one of --concurrency or --rate"),
        (["--concurrency", "1", "4"], "needs one of --requests, --per-stream, --duration"),
        (["--concurrency", "1", "--requests", "2", "--duration", "3"], "not --requests and --duration"),
        (["--concurrency", "0", "--requests", "2"], "must be at least 1"),
        (["--rate", "2"], "--rate needs --requests"),
        (["--rate", "-1", "--requests", "2"], "must be above 0"),
        (["--concurrency", "1", "--requests", "2", "--input-spread", "1.5"], "[0, 1)"),
        (["--concurrency", "1", "--requests", "2", "--server", "nowhere"], "is not HOST:PORT"),
        (["--concurrency", "1", "--rate", "2", "--requests", "2"], "not allowed with argument"),
    ],
)
def test_bad_arguments_are_one_line(capsys, argv, says):
    with pytest.raises(SystemExit) as exit_:
        served_load.main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and says in err and err.count("\n") == 1


# ---------------------------------------------------------------------- against a real server


@pytest.fixture(scope="module")
def engine():
    e = Engine(load_model("tiny-qwen2", "cpu"))
    yield e
    e.close()


@pytest.fixture
async def server(engine):
    srv, port = await start_grpc(engine, "127.0.0.1:0")
    yield f"127.0.0.1:{port}"
    await srv.stop(0)


async def test_a_failed_request_is_counted_not_raised(server):
    async with grpc.aio.insecure_channel(server) as channel:
        stub = igrpc.InferenceStub(channel)
        bad = await served_load.send(stub, served_load.Spec((10**9,), 3), timeout=30)
        ok = await served_load.send(stub, served_load.Spec((101, 102, 103), 3), timeout=30)
    assert bad.error == "INVALID_ARGUMENT" and not bad.ok
    assert ok.ok and ok.output_tokens == 3 and len(ok.chunk_times) >= 1
    assert await served_load.probe_vocab(server) == 512


async def test_a_concurrency_sweep_against_the_live_server(server, tmp_path):
    levels, per_stream = (1, 3), 2
    argv = ["--server", server, "--concurrency", *map(str, levels), "--per-stream", str(per_stream),
            "--input-len", "12", "--output-len", "6", "--output-spread", "0.5", "--seed", "7",
            "--out", str(tmp_path), "--name", "sweep", "--no-plot"]  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(ROOT / "bench" / "served_load.py"), *argv, cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, out.decode()
    result = json.loads((tmp_path / "sweep.json").read_text())
    assert result["command"].startswith("python bench/served_load.py --server")
    assert result["server"]["model"] == "tiny-qwen2" and result["server"]["device"] == "cpu"
    assert result["server"]["vocab"] == 512
    assert [lv["concurrency"] for lv in result["levels"]] == list(levels)
    args = served_load.parser().parse_args(argv)
    for lv in result["levels"]:
        n = lv["concurrency"] * per_stream
        assert (lv["requests"], lv["completed"], lv["failed"], lv["incomplete"]) == (n, n, 0, 0), lv
        specs = served_load.Specs(args, 512, f"concurrency={lv['concurrency']}")
        asked = [specs.next() for _ in range(n)]
        assert lv["output_tokens"] == sum(s.max_new_tokens for s in asked)  # every token asked, none more
        assert lv["input_tokens"] == sum(len(s.token_ids) for s in asked)
        assert lv["wall_s"] > 0 and lv["output_tokens_per_s"] > 0
        assert lv["output_tokens_per_s"] == pytest.approx(lv["output_tokens"] / lv["wall_s"])
        assert lv["requests_per_s"] == pytest.approx(n / lv["wall_s"])
        assert 0 <= lv["goodput_requests_per_s"] <= lv["requests_per_s"]
        for name in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            d = lv[name]
            assert 0 < d["p50"] <= d["p99"] <= d["max"], (name, d)
        assert lv["ttft_ms"]["max"] <= lv["e2e_ms"]["max"]
        assert lv["e2e_ms"]["max"] / 1e3 <= lv["wall_s"]
        assert lv["warmup"]["requests"] == lv["concurrency"] and lv["warmup"]["failed"] == 0
        parts = lv["server_latency"]  # the server's own split of the level's window
        assert set(parts) == {"queue", "prefill", "first_handoff", "handoff", "tick", "capture"}, parts
        assert parts["prefill"]["count"] >= 1 and parts["tick"]["count"] >= 1, parts
        assert all(0 <= p["p50_ms"] <= p["p99_ms"] <= p["max_ms"] for p in parts.values()), parts
    assert "server parts p50/p99 ms: queue" in out.decode()
    async with grpc.aio.insecure_channel(server) as channel:
        reply = await igrpc.AdminStub(channel).Health(ipb.HealthRequest())
    # every counted request, every warm-up and the vocabulary probe reached the server
    assert reply.requests_served >= sum(lv["requests"] + lv["concurrency"] for lv in result["levels"])


async def test_the_in_process_lane_drives_the_engine_with_the_served_sweeps_very_load(engine):
    """bench/served_inprocess.py's engine_same_load: served_load's requests and figures, Engine.generate as client."""
    inprocess = _load("served_inprocess")
    sweep = ["--concurrency", "2", "--per-stream", "2", "--input-len", "10", "--output-len", "5", "--seed", "3"]
    (level,) = await inprocess.same_load(engine, sweep, 512)
    args = served_load.parser().parse_args(sweep)
    specs = served_load.Specs(args, 512, "concurrency=2")
    asked = [specs.next() for _ in range(4)]
    assert (level["concurrency"], level["requests"], level["completed"], level["failed"]) == (2, 4, 4, 0)
    assert level["output_tokens"] == sum(s.max_new_tokens for s in asked)  # the served sweep's very requests
    assert level["input_tokens"] == sum(len(s.token_ids) for s in asked)
    assert level["warmup"]["requests"] == 2 and 0 < level["ttft_ms"]["p50"] <= level["e2e_ms"]["max"]


# ---------------------------------------------------------------------- the before/after script, on CPU


def _script(tmp_path: Path, *extra: str):
    import subprocess

    argv = ["bash", str(ROOT / "scripts" / "served_before_after.sh"), "--model", "tiny-qwen2", "--device", "cpu",
            "--levels", "1", "2", "--per-stream", "1", "--input-len", "8", "--output-len", "4", "--max-targets", "1",
            "--max-candidates", "1", "--in-process", "no", "--out", str(tmp_path), *extra]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("YANTRA_", "NATS_"))}
    return subprocess.Popen(argv, cwd=ROOT, env={**env, "PYTHON": sys.executable}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip


def _stack_gone(result: dict) -> bool:
    from services.core.stack import running_stack

    return running_stack(Path(result["logs_dir"])) is None


@pytest.mark.e2e
def test_before_after_script_runs_the_whole_sequence_and_stops_the_stack(tmp_path):
    proc = _script(tmp_path, "--budget-s", "240")
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    result = json.loads((tmp_path / "served_tiny-qwen2_cpu.json").read_text())
    assert list(result["steps"]) == ["up", "sweep_before", "optimize", "sweep_after", "stop"], result["steps"]
    assert all(s["ok"] for s in result["steps"].values())
    assert result["run"]["run_id"] and result["run"]["exit"] == 0 and result["run"]["outcome"]
    assert result["run"]["holds"] == [] or all(h["hold_s"] > 0 for h in result["run"]["holds"])
    for label in ("before", "after"):
        assert [lv["completed"] for lv in result[label]["levels"]] == [1, 2]
        assert result[label]["server"]["instance_id"] == result["before"]["server"]["instance_id"]
    assert set(result["after_vs_before_output_tokens_per_s"]) == {"1", "2"}
    assert result["in_process"] is None and "not asked" in result["in_process_reason"]
    assert _stack_gone(result)


@pytest.mark.e2e
def test_before_after_script_stopped_midway_still_writes_and_stops(tmp_path):
    import signal
    import time

    proc = _script(tmp_path, "--budget-s", "240")
    path = tmp_path / "served_tiny-qwen2_cpu.json"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if path.exists() and "sweep_before" in json.loads(path.read_text() or "{}").get("steps", {}):
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)  # a caller's timeout
    out, _ = proc.communicate(timeout=90)
    result = json.loads(path.read_text())
    assert proc.returncode == 1, out
    assert result["steps"]["stopped"]["ok"] is False and result["steps"]["stop"]["ok"] is True
    assert result["before"]["levels"] and result["after"] is None
    assert _stack_gone(result)


def test_the_script_reads_each_swaps_hold_from_the_runs_event_lines():
    from services.core import events as ev
    from services.core.describe import describe
    from services.core.pb import events_pb2 as pb

    parts = [pb.HoldPart(name=n, seconds=t) for n, t in (("record_apart", 0.2), ("apply", 0.01), ("canary", 0.3))]
    observed = pb.ParityObservation(hold_s=0.62, hold_parts=parts)
    lines = []
    for swap_id, seen in (("swap-a", observed), ("swap-b", pb.ParityObservation(hold_s=1.03))):
        msg = pb.SwapCommitted(swap_id=swap_id, candidate_id="c1", modules_patched=5, observed=seen)
        lines.append("  " + describe(ev.Recorded(1, ev.make_envelope("run-1", msg, producer="server", time_ns=1))))
    script = _load("served_before_after")
    holds = script.swap_holds("\n".join(["  12:00:00.000 coder      CandidateProposed c1", *lines]))
    assert holds == [
        {"swap_id": "swap-a", "hold_s": 0.62, "parts": "apply 0.01, canary 0.30; record_apart 0.20 before it"},
        {"swap_id": "swap-b", "hold_s": 1.03, "parts": ""},  # recorded before the parts
    ]
