"""The in-process figures that sit beside bench/served_load.py's: the server's engine driven directly (no gRPC, no
second process) and HF eager `generate`, at the same stream counts and mean lengths, on the GPU.

It runs two of bench/serving.py's lanes (its `engine_streams` and `hf_eager`, unchanged) and none of its swap or
plain-graph work, so that it fits beside a served run: every stream's prompt is --prompt-tokens long and asks
--tokens new tokens (served_load draws lengths around the same means).

With --sweep (bench/served_load.py's own arguments, after it), a third lane, "engine_same_load", drives the engine
with the very load the served sweep sends — the same seeded requests, lengths, closed loop, warm-up and figures
(served_load's `run_level`, its client swapped for one that calls `Engine.generate` in this process): the fixed-
length lanes start every stream together and end them together, a closed loop of drawn lengths has joins all
along and a tail, so only this lane is the served sweep's like-for-like.

  python bench/served_inprocess.py --model qwen2.5-1.5b-shape --streams 1 16 64 --prompt-tokens 64 --tokens 128 \\
      --out /tmp/inprocess.json --sweep --concurrency 1 16 64 --per-stream 3 --input-len 64 --output-len 128

With --repeated-gqa-too, the engine lane runs again on a second engine (fresh graphs) with transformers' own SDPA
attention, which copies every key/value head once per query head at a decode step (services.server.gqa_decode): the
packed and the repeated attention side by side in one run, as "engine_repeated_gqa" and each level's ratio:

  python bench/served_inprocess.py --model qwen2.5-1.5b-shape --streams 1 16 64 --no-hf-eager --repeated-gqa-too \\
      --out bench/results/gqa_decode_h200.json

With --beside, other presets run the engine lane after --model's, at the same streams and lengths, each loaded
alone (the one before freed), and the result gives each one's tokens/s over --model's: the batched lane's other
layer kinds beside full attention at one size (issue 27's target: >= 0.8 at 16 streams):

  python bench/served_inprocess.py --model qwen2.5-1.5b-shape --streams 16 --no-hf-eager \\
      --beside gemma3-1.5b-shape jamba-1.5b-shape --out bench/results/layer_kinds.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import served_load  # noqa: E402  (bench/served_load.py: the served sweep's requests and figures)
import serving  # noqa: E402  (bench/serving.py: its lanes, as they are)
import torch  # noqa: E402

from services.core.settings import Settings  # noqa: E402
from services.server import gqa_decode  # noqa: E402
from services.server.engine import Engine  # noqa: E402
from services.server.models import load_model  # noqa: E402


class _Chunk:
    def __init__(self, token_ids: list[int]):
        self.token_ids = token_ids


class EngineStub:
    """served_load's client, in process: `Generate` as the gRPC stub streams it, from `Engine.generate`."""

    def __init__(self, engine: Engine):
        self.engine = engine

    async def Generate(self, request, timeout: float | None = None):  # noqa: N802 (the stub's method name)
        ids, eos = list(request.token_ids), not request.ignore_eos
        chunks = self.engine.generate(ids, request.max_new_tokens, stop_at_eos=eos)
        async with asyncio.timeout(timeout):
            async for chunk in chunks:
                yield _Chunk(chunk)


class EngineChannels:
    def __init__(self, engine: Engine):
        self.engine = engine

    def stubs(self, n: int) -> list[EngineStub]:
        return [EngineStub(self.engine) for _ in range(n)]


async def same_load(engine: Engine, sweep: list[str], vocab: int) -> list[dict]:
    """The served sweep's levels (concurrency only), each driven in process through served_load's own code."""
    load_args = served_load.parser().parse_args(sweep)
    levels = []
    for mode, value in served_load.level_plan(load_args):
        if mode != "concurrency":
            continue
        level = await served_load.run_level(load_args, EngineChannels(engine), vocab, mode, value)
        print(f"engine, same load: {served_load.describe_level(level)}", flush=True)
        levels.append(level)
    return levels


async def beside(args, reference: list[dict]) -> dict:
    """The engine lane of each --beside preset at --model's streams, and its tokens/s over --model's."""
    base = {row["streams"]: row["tokens_per_s"] for row in reference}
    others: dict[str, dict] = {}
    for name in args.beside:
        engine = Engine(load_model(name, "cuda"), slots=max(args.streams))
        rows = []
        try:
            if engine.lane_problem:  # refused: requests would decode one at a time, so no figure stands for it
                print(f"{name}: no batched lane ({engine.lane_problem})", flush=True)
            for n in args.streams if engine.batcher is not None else ():
                ids = serving.prompts(engine.loaded.vocab_size, n, args.prompt_tokens)
                row = await serving.engine_streams(engine, ids, args.tokens)
                row.pop("first_stream", None)
                rows.append({"streams": n, **row, "over_model": row["tokens_per_s"] / base[n]})
                print(
                    f"{name}, {n} streams: {row['tokens_per_s']:.1f} tok/s, x{rows[-1]['over_model']:.2f}", flush=True
                )
        finally:
            # the lane it ran on: a refused batched lane (the solo lane then) is named, never a silent figure
            others[name] = {"lane_problem": engine.lane_problem, "graphs": engine.graphs, "engine": rows}
            engine.close()
            del engine
            torch.cuda.empty_cache()
    return others


async def repeated_gqa(args, loaded, packed: list[dict]) -> list[dict]:
    """The engine lane again with transformers' own SDPA attention (a copy of the cache per query head at each
    decode step), on a fresh engine whose graphs are captured with it; each level's tokens/s over the packed lane's."""
    base = {row["streams"]: row["tokens_per_s"] for row in packed}
    rows = []
    gqa_decode.install(False)
    try:
        engine = Engine(loaded, slots=max(args.streams))
        try:
            for n in args.streams:
                ids = serving.prompts(loaded.vocab_size, n, args.prompt_tokens)
                row = await serving.engine_streams(engine, ids, args.tokens)
                row.pop("first_stream", None)
                rows.append({"streams": n, **row, "packed_over_repeated": base[n] / row["tokens_per_s"]})
                print(
                    f"engine, repeated GQA, {n} streams: {row['tokens_per_s']:.1f} tok/s "
                    f"(packed x{rows[-1]['packed_over_repeated']:.2f})",
                    flush=True,
                )
        finally:
            engine.close()
    finally:
        gqa_decode.install(True)
        torch.cuda.empty_cache()
    return rows


async def run(args) -> dict:
    t0 = time.perf_counter()
    loaded = load_model(args.model, "cuda")
    engine = Engine(loaded, slots=max(args.streams))
    loaded_s = time.perf_counter() - t0
    lanes: dict[str, list[dict]] = {"engine": [], "hf_eager": [], "engine_same_load": []}
    try:
        if args.sweep:
            lanes["engine_same_load"] = await same_load(engine, args.sweep, loaded.vocab_size)
        for n in args.streams:
            ids = serving.prompts(loaded.vocab_size, n, args.prompt_tokens)
            row = await serving.engine_streams(engine, ids, args.tokens)
            row.pop("first_stream", None)
            lanes["engine"].append({"streams": n, **row})
            print(
                f"engine, {n} streams: {row['tokens_per_s']:.1f} tok/s, TTFT {row['ttft_s'] * 1e3:.1f} ms", flush=True
            )
            if not args.no_hf_eager:
                row = serving.hf_eager(engine.model, ids, args.tokens)
                lanes["hf_eager"].append({"streams": n, **row})
                print(f"hf_eager, {n} streams: {row['tokens_per_s']:.1f} tok/s", flush=True)
            torch.cuda.empty_cache()
    finally:
        engine.close()
    del engine
    torch.cuda.empty_cache()
    if args.repeated_gqa_too:
        lanes["engine_repeated_gqa"] = await repeated_gqa(args, loaded, lanes["engine"])
    loaded.model = None  # --beside loads its presets one at a time: this one's weights freed first
    torch.cuda.empty_cache()
    others = await beside(args, lanes["engine"]) if args.beside else {}
    return {
        "command": "python bench/served_inprocess.py " + shlex.join(sys.argv[1:]),
        "gpu": torch.cuda.get_device_name(),
        "model": args.model,
        "dtype": str(loaded.dtype).removeprefix("torch."),
        "prompt_tokens": args.prompt_tokens,
        "new_tokens": args.tokens,
        "load_s": loaded_s,
        "wall_s": time.perf_counter() - t0,
        "switch_interval_ms": sys.getswitchinterval() * 1000,
        "note": "fixed lengths (the served run's means); engine: all streams start together after a warm-up round; "
        "ttft_s is the median over streams; hf_eager: one padded-free batch, ttft_s one prefill + first token",
        "lanes": {k: v for k, v in lanes.items() if v},
        **({"beside": others} if others else {}),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="qwen2.5-1.5b-shape")
    p.add_argument("--streams", type=int, nargs="+", default=[1, 16, 64])
    p.add_argument("--prompt-tokens", type=int, default=64)
    p.add_argument("--tokens", type=int, default=128, help="new tokens per stream")
    p.add_argument("--no-hf-eager", action="store_true", help="the engine's lane only")
    p.add_argument(
        "--beside", nargs="+", default=[], metavar="PRESET",
        help="presets run through the engine lane after --model, at its streams; each one's tokens/s over --model's",
    )  # fmt: skip
    p.add_argument(
        "--repeated-gqa-too", action="store_true",
        help="the engine lane again with transformers' own SDPA attention (a copy of the cache per query head)",
    )  # fmt: skip
    p.add_argument("--out", type=Path, required=True, help="the result file (.json)")
    p.add_argument(
        "--sweep", nargs=argparse.REMAINDER, default=[],
        help="the rest of the line: bench/served_load.py's arguments; adds the engine_same_load lane",
    )  # fmt: skip
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("served_inprocess: needs a GPU (bench/serving.py's lanes are CUDA-only)", file=sys.stderr)
        return 2
    # the server's own interpreter-lock switch interval (YANTRA_SWITCH_INTERVAL_MS, services/server/__main__.py):
    # the engine's thread and the streams' event loop share the lock here as they do there, so like for like
    sys.setswitchinterval(Settings.from_env().switch_interval_ms / 1000)
    result = asyncio.run(run(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
