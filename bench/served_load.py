"""A serving benchmark over the real API: a load generator speaking the inference server's gRPC (Inference.Generate).

Prompts are random token ids (seeded: the same seed and level send the same requests, so a run before and one
after an optimisation meet the same load), their lengths drawn uniformly around --input-len / --output-len
(±spread), every request asking ignore_eos so that it produces exactly the tokens it asks for. Two modes:

  --concurrency N [N ...]   a closed loop of N streams, each sending its next request when the last one ends,
                            for --requests in all, --per-stream each, or --duration seconds (requests in flight
                            at the deadline finish and count)
  --rate R [R ...]          Poisson arrivals at R requests/s (exponential gaps, seeded; inf: all at once),
                            --requests in all

Each level starts with a warm-up (one round of the level's concurrency, or --warmup requests at once for a rate)
that is not counted: it captures the engine's graphs for the batch widths the level meets. Per level: throughput
(output tokens/s, requests/s), TTFT / TPOT / ITL / end-to-end mean, p50, p99 (ms), goodput (completed requests/s
meeting the SLO: --slo-ttft-ms and --slo-tpot-ms) and failed requests by gRPC status (a failure is counted, never
fatal). The client's own CPU time over each level is reported too: near 1 s a second, the client (one Python
process) and not the server may be what limits the figures. Definitions: bench/load_stats.py.

The server: --server HOST:PORT, else the one a running `yantra up` on --data-dir (or YANTRA_DATA_DIR, default
.yantra) serves, else YANTRA_SERVER_ADDR / 127.0.0.1:50551. YANTRA_ADMIN_TOKEN, when set, is sent with Health.
The vocabulary is asked of the server (its refusal of an id past any vocabulary names the range) unless --vocab.

Output: --out DIR (default bench/results) / NAME.json (default served_<model>_<device>) with the exact command,
the server's Health, the settings and each level's figures, and NAME.png beside it (matplotlib, when importable).

  python bench/served_load.py --concurrency 1 16 64 --per-stream 4 --input-len 64 --output-len 128
  python bench/served_load.py --rate 2 8 32 --requests 200 --slo-ttft-ms 200 --slo-tpot-ms 30
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import re
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from load_stats import Request, summarize  # noqa: E402

from services.core.admin_auth import metadata  # noqa: E402
from services.core.pb import inference_pb2 as ipb  # noqa: E402
from services.core.pb import inference_pb2_grpc as igrpc  # noqa: E402
from services.core.server_client import ServerUnavailable, graphs_captured  # noqa: E402

PROG = "served_load"
FAR_PAST_ANY_VOCAB = 2**62


class LoadError(RuntimeError):
    """A problem that ends the run in one line (the server unreachable, a load that cannot fit the model)."""


# ---------------------------------------------------------------------- the requests


@dataclass(frozen=True)
class Spec:
    token_ids: tuple[int, ...]
    max_new_tokens: int


def lengths(rng: random.Random, mean: int, spread: float) -> int:
    """A length drawn uniformly from [mean·(1-spread), mean·(1+spread)], at least 1."""
    lo, hi = max(1, round(mean * (1 - spread))), max(1, round(mean * (1 + spread)))
    return rng.randint(lo, hi)


def length_bounds(mean: int, spread: float) -> tuple[int, int]:
    return max(1, round(mean * (1 - spread))), max(1, round(mean * (1 + spread)))


class Specs:
    """The requests of one level, drawn lazily from one seeded stream (a duration run takes as many as it needs)."""

    def __init__(self, args: argparse.Namespace, vocab: int, key: str):
        self.rng = random.Random(f"{args.seed}:{key}")  # a str seed is hashed the same way in every process
        self.args = args
        self.lo = min(100, vocab // 8)  # away from the special ids at both ends, as bench/serving.py draws them
        self.hi = max(self.lo + 1, vocab - self.lo)

    def next(self) -> Spec:
        a = self.args
        n_in = lengths(self.rng, a.input_len, a.input_spread)
        n_out = lengths(self.rng, a.output_len, a.output_spread)
        return Spec(tuple(self.rng.randrange(self.lo, self.hi) for _ in range(n_in)), n_out)


# ---------------------------------------------------------------------- one request


async def send(stub: igrpc.InferenceStub, spec: Spec, timeout: float) -> Request:
    """One streamed Generate, timed chunk by chunk; any failure is recorded on the request, never raised."""
    r = Request(sent=time.perf_counter(), input_tokens=len(spec.token_ids), asked_tokens=spec.max_new_tokens)
    request = ipb.GenerateRequest(token_ids=spec.token_ids, max_new_tokens=spec.max_new_tokens, ignore_eos=True)
    try:
        async for chunk in stub.Generate(request, timeout=timeout):
            if chunk.token_ids:
                r.chunk_times.append(time.perf_counter())
                r.output_tokens += len(chunk.token_ids)
        r.ended = time.perf_counter()
    except grpc.aio.AioRpcError as exc:
        r.error = exc.code().name
    except Exception as exc:  # a client-side failure is one failed request too
        r.error = type(exc).__name__
    return r


class Channels:
    """`count` channels (0: one a stream) handed out round-robin."""

    def __init__(self, addr: str, count: int):
        self.addr, self.count = addr, count
        self.open: list[grpc.aio.Channel] = []

    def stubs(self, n: int) -> list[igrpc.InferenceStub]:
        want = n if self.count == 0 else self.count
        while len(self.open) < want:
            self.open.append(grpc.aio.insecure_channel(self.addr))
        return [igrpc.InferenceStub(self.open[i % want]) for i in range(n)]

    async def close(self) -> None:
        for ch in self.open:
            await ch.close()


# ---------------------------------------------------------------------- the two modes


async def closed_loop(stubs, specs: Specs, total: int | None, deadline_s: float | None, timeout: float):
    """len(stubs) streams, each sending its next request as the last ends, until `total` are sent or the deadline."""
    done: list[Request] = []
    sent = 0
    end = time.perf_counter() + deadline_s if deadline_s is not None else None

    async def stream(stub):
        nonlocal sent
        while (total is None or sent < total) and (end is None or time.perf_counter() < end):
            sent += 1
            done.append(await send(stub, specs.next(), timeout))

    t0 = time.perf_counter()
    await asyncio.gather(*(stream(s) for s in stubs))
    return done, time.perf_counter() - t0


async def poisson(stubs, specs: Specs, total: int, rate: float, timeout: float):
    """`total` requests arriving as a Poisson process of `rate` a second (inf: all at once)."""
    tasks = []
    t0 = time.perf_counter()
    at = 0.0
    for i in range(total):
        spec = specs.next()
        if i and math.isfinite(rate):
            at += specs.rng.expovariate(rate)
            delay = t0 + at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(send(stubs[i % len(stubs)], spec, timeout)))
    done = list(await asyncio.gather(*tasks))
    return done, time.perf_counter() - t0


async def warm_up(stubs, specs: Specs, n: int, timeout: float) -> dict:
    t0 = time.perf_counter()
    done = await asyncio.gather(*(send(stubs[i % len(stubs)], specs.next(), timeout) for i in range(n)))
    first = [r.chunk_times[0] - r.sent for r in done if r.chunk_times]
    return {
        "requests": n,
        "failed": sum(1 for r in done if not r.ok),
        "wall_s": time.perf_counter() - t0,
        "ttft_max_ms": max(first) * 1e3 if first else None,
    }


# ---------------------------------------------------------------------- the server


async def health(addr: str, token: str, timeout: float) -> ipb.HealthReply:
    async with grpc.aio.insecure_channel(addr) as channel:
        try:
            return await igrpc.AdminStub(channel).Health(ipb.HealthRequest(), timeout=timeout, metadata=metadata(token))
        except grpc.aio.AioRpcError as exc:
            raise LoadError(f"no inference server answers at {addr}: {exc.details() or exc.code().name}") from exc


async def server_latency(addr: str, token: str, window_s: float) -> dict:
    """Where the server says the last `window_s` went (Admin.ServingLatency: each first token's queue, prefill and
    hand-off to the event loop, each tick's hand-off and length), by part; {"unavailable": why} from a server
    without it."""
    async with grpc.aio.insecure_channel(addr) as channel:
        try:
            reply = await igrpc.AdminStub(channel).ServingLatency(
                ipb.ServingLatencyRequest(window_s=window_s), timeout=10, metadata=metadata(token)
            )
        except grpc.aio.AioRpcError as exc:
            return {"unavailable": f"{exc.code().name}: {exc.details()}"}
    keys = ("count", "p50_ms", "p99_ms", "max_ms", "mean_ms")
    return {p.name: {k: getattr(p, k) for k in keys} for p in reply.parts}


def describe_latency(parts: dict) -> str:
    if "unavailable" in parts:
        return f"  server parts: unavailable ({parts['unavailable']})"
    shown = ", ".join(f"{name} {p['p50_ms']:.2f}/{p['p99_ms']:.2f}" for name, p in parts.items() if p["count"])
    return f"  server parts p50/p99 ms: {shown}"


async def wait_ready(addr: str, token: str, wait_s: float) -> ipb.HealthReply:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            reply = await health(addr, token, timeout=2.0)
            if reply.ready:
                return reply
            problem = f"the inference server at {addr} is not ready"
        except LoadError as exc:
            problem = str(exc)
        if time.monotonic() >= deadline:
            raise LoadError(problem + (f" (waited {wait_s:g}s)" if wait_s else " (--wait-ready S waits for it)"))
        await asyncio.sleep(0.5)


async def probe_vocab(addr: str) -> int:
    """The server's vocabulary size, read from its refusal of an id past any vocabulary."""
    async with grpc.aio.insecure_channel(addr) as channel:
        stub = igrpc.InferenceStub(channel)
        try:
            async for _ in stub.Generate(ipb.GenerateRequest(token_ids=[FAR_PAST_ANY_VOCAB], max_new_tokens=1)):
                pass
        except grpc.aio.AioRpcError as exc:
            found = re.search(r"vocabulary 0\.\.(\d+)", exc.details() or "")
            if found:
                return int(found.group(1)) + 1
            raise LoadError(f"cannot learn the vocabulary from the server ({exc.details()}); give --vocab N") from exc
    raise LoadError("the server accepted a token id past any vocabulary; give --vocab N")


def server_address(args: argparse.Namespace) -> str:
    if args.server:
        return args.server
    from services.core.settings import Settings
    from services.core.stack import resolve_server_addr

    try:
        return resolve_server_addr(Settings.from_env(data_dir=args.data_dir))
    except Exception as exc:  # invalid settings in the environment
        raise LoadError(f"cannot tell the server's address ({exc}); give --server HOST:PORT") from exc


# ---------------------------------------------------------------------- a run


def level_plan(args: argparse.Namespace) -> list[tuple[str, float]]:
    if args.concurrency:
        return [("concurrency", n) for n in args.concurrency]
    return [("rate", r) for r in args.rate]


async def run_level(args, channels: Channels, vocab: int, mode: str, value: float) -> dict:
    key = f"{mode}={value:g}"
    if mode == "concurrency":
        n = int(value)
        stubs = channels.stubs(n)
        warm = await warm_up(stubs, Specs(args, vocab, "warmup:" + key), n if args.warmup is None else args.warmup,
                             args.request_timeout)  # fmt: skip
        total = args.requests if args.requests is not None else (n * args.per_stream if args.per_stream else None)
        cpu0 = time.process_time()
        done, wall = await closed_loop(stubs, Specs(args, vocab, key), total, args.duration, args.request_timeout)
    else:
        stubs = channels.stubs(args.streams_per_rate)
        warm = await warm_up(stubs, Specs(args, vocab, "warmup:" + key), 4 if args.warmup is None else args.warmup,
                             args.request_timeout)  # fmt: skip
        cpu0 = time.process_time()
        done, wall = await poisson(stubs, Specs(args, vocab, key), args.requests, value, args.request_timeout)
    cpu = time.process_time() - cpu0
    figures = summarize(done, wall, args.slo_ttft_ms, args.slo_tpot_ms)
    level = {mode: int(value) if mode == "concurrency" else value if math.isfinite(value) else "inf"}
    return {**level, **figures, "warmup": warm, "client_cpu_s": cpu, "client_cpu_per_wall_s": cpu / wall}


def describe_level(level: dict) -> str:
    what = f"{level['concurrency']} streams" if "concurrency" in level else f"rate {level['rate']}/s"

    def ms(name: str, q: str) -> str:
        v = level[name][q]
        return "-" if v is None else f"{v:.1f}"

    return (
        f"{what}: {level['completed']}/{level['requests']} done, {level['failed']} failed, "
        f"{level['output_tokens_per_s']:.1f} out tok/s, {level['requests_per_s']:.2f} req/s, "
        f"TTFT p50/p99 {ms('ttft_ms', 'p50')}/{ms('ttft_ms', 'p99')} ms, "
        f"TPOT {ms('tpot_ms', 'p50')}/{ms('tpot_ms', 'p99')} ms, ITL {ms('itl_ms', 'p50')}/{ms('itl_ms', 'p99')} ms, "
        f"goodput {level['goodput_requests_per_s']:.2f} req/s, client cpu {level['client_cpu_per_wall_s']:.2f}"
    )


async def run(args: argparse.Namespace, argv: list[str]) -> dict:
    addr = server_address(args)
    token = os.environ.get("YANTRA_ADMIN_TOKEN", "")
    reply = await wait_ready(addr, token, args.wait_ready)
    try:  # the graphs of the kernels serving now, before the load (services.core.server_client)
        graphs_stale, graphs_wait_s = await graphs_captured(addr, args.wait_graphs)
    except ServerUnavailable as exc:
        raise LoadError(str(exc)) from exc
    if graphs_stale:
        print(f"{graphs_stale} graphs still stale after {graphs_wait_s:.0f} s: measuring anyway", flush=True)
    vocab = args.vocab or await probe_vocab(addr)
    longest = (
        length_bounds(args.input_len, args.input_spread)[1] + length_bounds(args.output_len, args.output_spread)[1]
    )
    if reply.max_positions and longest > reply.max_positions:
        raise LoadError(
            f"the longest request ({longest} tokens, prompt + output) exceeds the model's {reply.max_positions} "
            "positions; lower --input-len/--output-len or their spreads"
        )
    server = {
        "addr": addr,
        "model": reply.model,
        "device": reply.device,
        "dtype": reply.dtype,
        "instance_id": reply.instance_id,
        "max_positions": reply.max_positions,
        "requests_served_before": reply.requests_served,
        "graphs_stale": graphs_stale,
        "graphs_wait_s": round(graphs_wait_s, 2),
        "vocab": vocab,
    }
    print(f"{addr}: {reply.model} on {reply.device} ({reply.dtype}), vocabulary {vocab}", flush=True)
    settings = {
        k: getattr(args, k)
        for k in ("concurrency", "rate", "requests", "per_stream", "duration", "input_len", "input_spread",
                  "output_len", "output_spread", "seed", "warmup", "channels", "streams_per_rate",
                  "request_timeout", "slo_ttft_ms", "slo_tpot_ms")
    }  # fmt: skip
    channels = Channels(addr, args.channels)
    levels = []
    t0 = time.perf_counter()
    try:
        for mode, value in level_plan(args):
            level = await run_level(args, channels, vocab, mode, value)
            level["server_latency"] = await server_latency(addr, token, level["wall_s"])  # the timed part alone
            print(describe_level(level), flush=True)
            print(describe_latency(level["server_latency"]), flush=True)
            levels.append(level)
    finally:
        await channels.close()
    return {
        "command": "python bench/served_load.py " + shlex.join(argv),
        "note": "one Python client process; client_cpu_per_wall_s near 1 means the client may limit the figures",
        "label": args.label,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "server": server,
        "settings": settings,
        "wall_s": time.perf_counter() - t0,
        "levels": levels,
    }


# ---------------------------------------------------------------------- the plot


def series_of(payload: dict) -> dict[str, list[dict]]:
    """The plot's lines of a result: one for a served_load file; for a before/after file (served_before_after.py)
    the served runs before and after, and the in-process engine's and HF eager's figures when it holds them."""
    if "levels" in payload:
        return {payload.get("label") or "served": points(payload)}
    out = {f"served, {key}": points(payload[key]) for key in ("before", "after") if payload.get(key)}
    for lane, rows in ((payload.get("in_process") or {}).get("lanes") or {}).items():
        if rows and "levels" not in rows[0] and "concurrency" in rows[0]:  # engine_same_load: the sweep's own levels
            out[f"in-process {lane}"] = points({"levels": rows})
            continue
        out[f"in-process {lane}"] = [
            {"x": r["streams"], "tok_s": r["tokens_per_s"], "ttft_p50": r["ttft_s"] * 1e3, "ttft_p99": None,
             "tpot_p50": r.get("tpot_p50_ms"), "tpot_p99": r.get("tpot_p99_ms")}
            for r in rows
        ]  # fmt: skip
    return out


def title_of(payload: dict) -> str:
    s = payload.get("server") or (payload.get("before") or payload.get("after") or {}).get("server") or {}
    return f"{s.get('model', '?')} on {s.get('device', '?')} ({s.get('dtype', '?')}), streaming over gRPC"


def points(payload: dict) -> list[dict]:
    """A served_load result's levels as plot points: x (streams or rate), tok/s, TTFT and TPOT p50/p99 (ms)."""
    out = []
    for lv in payload.get("levels") or []:
        out.append({
            "x": lv.get("concurrency", lv.get("rate")),
            "tok_s": lv["output_tokens_per_s"],
            "ttft_p50": lv["ttft_ms"]["p50"], "ttft_p99": lv["ttft_ms"]["p99"],
            "tpot_p50": lv["tpot_ms"]["p50"], "tpot_p99": lv["tpot_ms"]["p99"],
        })  # fmt: skip
    return out


def plot(series: dict[str, list[dict]], path: Path, title: str, xlabel: str = "concurrent streams") -> str:
    """Three panels over the levels: output tokens/s, TTFT and TPOT (p50 solid, p99 dashed). Returns a note."""
    try:
        import matplotlib
    except ImportError:
        return "matplotlib is not installed: no plot"
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for k, (label, pts) in enumerate(series.items()):
        pts = [p for p in pts if p.get("tok_s") is not None and isinstance(p["x"], int | float)]
        if not pts:
            continue
        color = f"C{k}"
        xs = [p["x"] for p in pts]
        axes[0].plot(xs, [p["tok_s"] for p in pts], "o-", color=color, label=label)
        for ax, name in ((axes[1], "ttft"), (axes[2], "tpot")):
            for q, style in (("p50", "o-"), ("p99", "x--")):
                ys = [p.get(f"{name}_{q}") for p in pts]
                if any(y is not None for y in ys):
                    ax.plot(xs, [math.nan if y is None else y for y in ys], style, color=color, label=f"{label} {q}")
    ticks = sorted({p["x"] for pts in series.values() for p in pts if isinstance(p.get("x"), int | float)})
    for ax, ylabel in zip(axes, ("output tokens/s (all streams)", "TTFT ms", "TPOT ms"), strict=True):
        ax.set_xscale("log", base=2)
        if ticks:
            ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
            ax.minorticks_off()
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[1].set_yscale("log")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"wrote {path.name}"  # beside the results file: no path of the machine that ran it


# ---------------------------------------------------------------------- arguments


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def non_negative_int(text: str) -> int:
    value = positive_int(text) if text.strip() != "0" else 0
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or math.isnan(value):
        raise argparse.ArgumentTypeError(f"{text} must be above 0")
    return value


def spread(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be in [0, 1): the fraction either side of the mean")
    return value


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = p.add_argument_group("the server")
    where.add_argument("--server", metavar="HOST:PORT", help="the inference server's gRPC address")
    where.add_argument("--data-dir", metavar="DIR", help="use the server of the `yantra up` running on DIR")
    where.add_argument(
        "--wait-ready",
        type=float,
        default=0.0,
        metavar="S",
        help="wait up to S seconds for the server to answer ready (default 0: it must already)",
    )
    where.add_argument(
        "--wait-graphs",
        type=float,
        default=120.0,
        metavar="S",
        help="wait up to S seconds for the server's CUDA graphs of the kernels serving now (after a swap or a "
        "revert the idle engine captures them one at a time; a load sent meanwhile waits behind captures) (120)",
    )
    mode = p.add_argument_group("the load (one mode)")
    modes = mode.add_mutually_exclusive_group()
    modes.add_argument(
        "--concurrency",
        type=positive_int,
        nargs="+",
        metavar="N",
        help="closed loop: N streams at once, one level per N (e.g. 1 16 64)",
    )
    modes.add_argument(
        "--rate",
        type=positive_float,
        nargs="+",
        metavar="R",
        help="Poisson arrivals at R requests/s, one level per R (inf: all at once)",
    )
    mode.add_argument("--requests", type=positive_int, metavar="N", help="requests per level (in all)")
    mode.add_argument(
        "--per-stream", type=positive_int, metavar="K", help="closed loop: requests per stream (N·K per level)"
    )
    mode.add_argument(
        "--duration", type=positive_float, metavar="S", help="closed loop: keep sending for S seconds per level"
    )
    mode.add_argument("--warmup", type=non_negative_int, metavar="N",
                      help="uncounted requests sent at once before each level (default: the level's streams; 4 for "
                      "a rate; 0: none)")  # fmt: skip
    mode.add_argument(
        "--channels",
        type=non_negative_int,
        default=0,
        metavar="K",
        help="gRPC channels the streams share (default 0: one a stream)",
    )
    mode.add_argument(
        "--streams-per-rate",
        type=positive_int,
        default=64,
        metavar="K",
        help="rate mode: requests are spread over K channels/stubs (default 64)",
    )
    shape = p.add_argument_group("the requests")
    shape.add_argument("--input-len", type=positive_int, default=64, metavar="T", help="mean prompt tokens (64)")
    shape.add_argument(
        "--input-spread",
        type=spread,
        default=0.5,
        metavar="F",
        help="prompt lengths uniform in T·(1±F) (default 0.5; 0: all T)",
    )
    shape.add_argument("--output-len", type=positive_int, default=128, metavar="T", help="mean new tokens (128)")
    shape.add_argument(
        "--output-spread",
        type=spread,
        default=0.5,
        metavar="F",
        help="new-token counts uniform in T·(1±F) (default 0.5)",
    )
    shape.add_argument("--seed", type=int, default=0, help="seeds prompts, lengths and arrivals (default 0)")
    shape.add_argument(
        "--vocab",
        type=positive_int,
        metavar="V",
        help="draw ids below V (default: the server's vocabulary, asked of it)",
    )
    shape.add_argument(
        "--request-timeout",
        type=positive_float,
        default=300.0,
        metavar="S",
        help="a request still streaming after S seconds fails as DEADLINE_EXCEEDED (default 300)",
    )
    slo = p.add_argument_group("goodput")
    slo.add_argument(
        "--slo-ttft-ms",
        type=positive_float,
        default=500.0,
        metavar="MS",
        help="a good request's first token within MS (default 500)",
    )
    slo.add_argument(
        "--slo-tpot-ms",
        type=positive_float,
        default=50.0,
        metavar="MS",
        help="a good request's time per output token within MS (default 50)",
    )
    out = p.add_argument_group("output")
    out.add_argument(
        "--out",
        type=Path,
        default=Path("bench/results"),
        metavar="DIR",
        help="directory of the result (default bench/results)",
    )
    out.add_argument("--name", metavar="NAME", help="file name without .json (default served_<model>_<device>)")
    out.add_argument("--label", default="", help="a label kept in the result (e.g. before, after)")
    out.add_argument("--no-plot", action="store_true", help="write no .png")
    out.add_argument(
        "--plot-only",
        type=Path,
        metavar="FILE",
        help="draw FILE.png from a result FILE (this one's, or a before/after one) and send nothing",
    )
    return p  # fmt: skip


def check(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.plot_only:
        return
    if not args.concurrency and not args.rate:
        p.error("one of --concurrency or --rate is required")
    if args.concurrency:
        given = [o for o, v in (("--requests", args.requests), ("--per-stream", args.per_stream),
                                ("--duration", args.duration)) if v is not None]  # fmt: skip
        if len(given) != 1:
            p.error("the closed loop needs one of --requests, --per-stream, --duration" + (
                f", not {' and '.join(given)}" if given else ""))  # fmt: skip
    else:
        if args.requests is None:
            p.error("--rate needs --requests")
        if args.per_stream is not None or args.duration is not None:
            p.error("--per-stream and --duration are for --concurrency")
    if args.name and not re.fullmatch(r"[A-Za-z0-9._-]+", args.name):
        p.error(f"--name {args.name!r}: letters, digits, '.', '_' and '-' only")
    if args.server and not re.fullmatch(r"[^:\s]+:\d+", args.server):
        p.error(f"--server {args.server!r} is not HOST:PORT")


def default_name(payload: dict) -> str:
    model = re.sub(r"[^A-Za-z0-9._-]+", "-", payload["server"]["model"] or "model")
    return f"served_{model}_{payload['server']['device'] or 'device'}"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = parser()
    args = p.parse_args(argv)
    check(p, args)
    if args.plot_only:
        try:
            payload = json.loads(args.plot_only.read_text())
        except (OSError, ValueError) as exc:
            print(f"{PROG}: cannot read {args.plot_only}: {exc}", file=sys.stderr)
            return 1
        rate = any("rate" in lv for lv in payload.get("levels") or [])
        print(plot(series_of(payload), args.plot_only.with_suffix(".png"), title_of(payload),
                   "requests/s (Poisson)" if rate else "concurrent streams"))  # fmt: skip
        return 0
    try:
        payload = asyncio.run(run(args, argv))
    except LoadError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / f"{args.name or default_name(payload)}.json"
        path.write_text(json.dumps(payload, indent=2) + "\n")
    except OSError as exc:
        print(f"{PROG}: cannot write the result: {exc.strerror or exc} ({exc.filename})", file=sys.stderr)
        return 1
    print(f"wrote {path}")
    if not args.no_plot:
        xlabel = "concurrent streams" if args.concurrency else "requests/s (Poisson)"
        print(plot(series_of(payload), path.with_suffix(".png"), title_of(payload), xlabel))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
