"""Serving on the GPU, side by side in one process, same model, weights and prompts:

  hf_eager       HF `generate`, eager, dynamic cache (the batch given as one padded-free tensor)
  plain_graphs   the stock model stepped through a CUDA graph over transformers' StaticCache: the ceiling
                 of "just turn on graphs" (no batching of arrivals: all streams start together)
  engine         this server's engine: continuous batching over the slot cache, one graph per bucket
  engine_swapped the same engine after the template RMSNorm kernel was swapped in through parity (the swap
                 a `yantra` run commits on this model), graphs captured again inside the hold

at 1, 16 and 64 concurrent streams: decode tokens/s (every stream's tokens over the wall time, prefill
included), time to first token, and for the engine the inter-token latency p50/p99 per stream.

  python bench/serving.py [--model qwen2.5-1.5b-shape] [--streams 1 16 64] [--tokens 128] [--out bench/results]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.core.kernels import candidate_wrapper  # noqa: E402
from services.core.pb import events_pb2 as pb  # noqa: E402
from services.ops.row_reduction import template as rmsnorm  # noqa: E402
from services.ops.row_reduction.contract import derive_contract  # noqa: E402
from services.server.engine import Engine  # noqa: E402
from services.server.introspection import introspect_module  # noqa: E402
from services.server.models import load_model  # noqa: E402
from services.server.parity import record_live_inputs, swap_with_parity, warm_kernel  # noqa: E402


def prompts(vocab: int, streams: int, length: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(100, vocab - 100, (streams, length), generator=g)


def synced(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0, out


# ---------------------------------------------------------------------- HF eager generate


def hf_eager(model, ids: torch.Tensor, tokens: int) -> dict:
    ids = ids.cuda()
    kw = {"do_sample": False, "pad_token_id": 0, "attention_mask": torch.ones_like(ids)}
    with torch.inference_mode():
        model.generate(ids, max_new_tokens=2, min_new_tokens=2, **kw)  # warm-up
        ttft, _ = synced(lambda: model.generate(ids, max_new_tokens=1, min_new_tokens=1, **kw))
        wall, out = synced(lambda: model.generate(ids, max_new_tokens=tokens, min_new_tokens=tokens, **kw))
    produced = (out.shape[1] - ids.shape[1]) * ids.shape[0]
    return {"tokens_per_s": produced / wall, "ttft_s": ttft, "wall_s": wall, "tokens": produced}


# ---------------------------------------------------------------------- plain CUDA-graph decode


def plain_graphs(model, ids: torch.Tensor, tokens: int, cache_kw: str) -> dict:
    """Prefill eager into a StaticCache, then each step one CUDA graph replay (greedy, all streams together)."""
    from transformers import StaticCache

    n, length = ids.shape
    ids = ids.cuda()
    total = length + tokens + 8
    dtype = next(model.parameters()).dtype
    span = torch.arange(total, device="cuda")
    masked = torch.finfo(dtype).min
    cache = StaticCache(config=model.config, max_cache_len=total)
    feed = torch.zeros((n, 1), dtype=torch.long, device="cuda")
    pos = torch.zeros((n, 1), dtype=torch.long, device="cuda")

    def forward(input_ids, positions, mask):
        out = model(input_ids=input_ids, position_ids=positions, attention_mask=mask, use_cache=True,
                    logits_to_keep=1, **{cache_kw: cache})  # fmt: skip
        return out.logits[:, -1]

    def step():
        mask = torch.where(span <= pos, 0.0, masked).to(dtype)[:, None, None, :]
        return forward(feed, pos, mask)

    def prefill():
        cache.reset()
        causal = torch.full((length, total), masked, dtype=dtype, device="cuda").triu(1)[None, None]
        positions = torch.arange(length, device="cuda")[None].expand(n, -1)
        return forward(ids, positions, causal.expand(n, 1, -1, -1))

    def counters():  # StaticCache writes where its own counter says: warm-up steps must not move it
        return [layer.cumulative_length.clone() for layer in cache.layers]

    with torch.inference_mode():
        logits = prefill()
        saved = counters()
        pos.fill_(length)
        feed.copy_(logits.argmax(-1, keepdim=True))
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                step()
        torch.cuda.current_stream().wait_stream(stream)
        for layer, value in zip(cache.layers, saved, strict=True):
            layer.cumulative_length.copy_(value)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = step()

        def decode():
            logits = prefill()
            pos.fill_(length)
            feed.copy_(logits.argmax(-1, keepdim=True))
            streams = [feed[:, 0].tolist()]
            for _ in range(tokens - 1):
                graph.replay()
                feed.copy_(out.argmax(-1, keepdim=True))
                pos.add_(1)
                streams.append(feed[:, 0].tolist())
            return streams

        decode()  # warm-up
        ttft, _ = synced(prefill)
        wall, streams = synced(decode)
    return {
        "tokens_per_s": n * tokens / wall,
        "ttft_s": ttft,
        "wall_s": wall,
        "tokens": n * tokens,
        "first_stream": [s[0] for s in streams],
    }


# ---------------------------------------------------------------------- the engine


async def engine_streams(engine: Engine, ids: torch.Tensor, tokens: int) -> dict:
    async def one(row: list[int]):
        t0 = time.perf_counter()
        stamps, out = [], []
        async for chunk in engine.generate(row, tokens, stop_at_eos=False):
            stamps.append(time.perf_counter())
            out += chunk
        return t0, stamps, out

    rows = ids.tolist()
    await asyncio.gather(*(one(r) for r in rows))  # warm-up: every bucket this load meets is captured here
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    results = await asyncio.gather(*(one(r) for r in rows))
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    ttft = [stamps[0] - start for start, stamps, _ in results]
    gaps = sorted(b - a for _, stamps, _ in results for a, b in zip(stamps, stamps[1:], strict=False))

    def pct(q: float) -> float:
        return gaps[min(len(gaps) - 1, int(q * len(gaps)))] if gaps else 0.0

    produced = sum(len(out) for _, _, out in results)
    return {
        "tokens_per_s": produced / wall,
        "ttft_s": statistics.median(ttft),
        "ttft_max_s": max(ttft),
        "itl_p50_s": pct(0.50),
        "itl_p99_s": pct(0.99),
        "wall_s": wall,
        "tokens": produced,
        "first_stream": results[0][2],
        # the rows of the lane's last step (results before 2026-12-04 call it widest_step, which it never was): with
        # joins staggered over ticks, the last joiners finish last, so it can be under the streams
        "last_step_rows": engine.batcher.stepped,
    }


def candidate(engine: Engine):
    """The template RMSNorm kernel (4 warps, one row a program) and its contract on this model's norm class."""
    norm = next(m for m in engine.model.modules() if type(m).__name__.endswith("RMSNorm"))
    contract = derive_contract(introspect_module(norm))
    config = rmsnorm.search_configs()[0]
    return contract, candidate_wrapper(Path(tempfile.mkdtemp()), rmsnorm.render(config), rmsnorm.plan(config))


async def swap_in(engine: Engine, canary: list[int]) -> tuple[object, pb.ParityObservation, float]:
    """As the server's handler does it: real inputs recorded (a profile does that), the kernel compiled on them
    outside the hold, then apply + parity + re-capture + served canary under the engine's lock (timed)."""
    contract, entry = candidate(engine)
    engine.live_inputs = await engine.exclusive(record_live_inputs, engine, canary, 8)
    await asyncio.to_thread(warm_kernel, engine, contract, entry)
    observed = pb.ParityObservation()

    def hold():
        t0 = time.perf_counter()
        handle = swap_with_parity(engine, contract, entry, canary, observed)
        return handle, time.perf_counter() - t0

    handle, held = await engine.exclusive(hold)
    if handle is None:
        raise SystemExit(f"the swap did not hold: {observed.error}")
    return handle, observed, held


def compare(logits: list[torch.Tensor], reference: list[torch.Tensor], tokens: list[int]) -> dict:
    """Max logit difference over the steps, and at how many steps the argmax is the reference's token."""
    diffs = [float((a - b).abs().max()) for a, b in zip(logits, reference, strict=True)]
    same = sum(int(a.argmax()) == t for a, t in zip(logits, tokens, strict=True))
    return {"max_logit_diff": max(diffs), "argmax_equal_steps": same, "steps": len(tokens)}


def agree(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


async def run(args) -> dict:
    loaded = load_model(args.model, "cuda")
    engine = Engine(loaded, slots=max(args.streams))
    model = engine.model
    results: dict[str, dict] = {k: {} for k in ("hf_eager", "plain_graphs", "engine", "engine_swapped")}
    for n in args.streams:
        ids = prompts(loaded.vocab_size, n, args.prompt_tokens)
        print(f"{n} streams ...", flush=True)
        results["hf_eager"][n] = hf_eager(model, ids, args.tokens)
        results["plain_graphs"][n] = plain_graphs(model, ids, args.tokens, engine._cache_kw)
        results["engine"][n] = await engine_streams(engine, ids, args.tokens)
        torch.cuda.empty_cache()
    canary = prompts(loaded.vocab_size, 1, 32, seed=1)[0].tolist()
    # Teacher-forced along the served lane's own greedy tokens: logits step by step over the same prefixes, so
    # a near-tie that flips one greedy choice (random weights: near-flat logits) does not hide the rest.
    probe = prompts(loaded.vocab_size, 1, args.prompt_tokens, seed=2)[0].tolist()
    stock, stock_logits = await engine.exclusive(
        functools.partial(engine.serve_decode, probe, args.tokens, keep_logits=True)
    )
    _, eager_logits = await engine.exclusive(
        functools.partial(engine.decode, probe, args.tokens, forced=stock, keep_logits=True)
    )
    handle, observed, hold = await swap_in(engine, canary)
    _, swapped_logits = await engine.exclusive(
        functools.partial(engine.serve_decode, probe, args.tokens, forced=stock, keep_logits=True)
    )
    for n in args.streams:
        ids = prompts(loaded.vocab_size, n, args.prompt_tokens)
        results["engine_swapped"][n] = await engine_streams(engine, ids, args.tokens)
    await engine.exclusive(handle.revert)
    one = min(args.streams)
    figures = {
        "engine_vs_hf_eager": {
            n: results["engine"][n]["tokens_per_s"] / results["hf_eager"][n]["tokens_per_s"] for n in args.streams
        },  # fmt: skip
        "engine_vs_plain_graphs": {
            n: results["engine"][n]["tokens_per_s"] / results["plain_graphs"][n]["tokens_per_s"] for n in args.streams
        },
        "swapped_vs_engine": {
            n: results["engine_swapped"][n]["tokens_per_s"] / results["engine"][n]["tokens_per_s"] for n in args.streams
        },
        "swapped_vs_hf_eager": {
            n: results["engine_swapped"][n]["tokens_per_s"] / results["hf_eager"][n]["tokens_per_s"]
            for n in args.streams
        },
    }
    first = {k: v[one].pop("first_stream") for k, v in results.items() if "first_stream" in v[one]}
    for v in results.values():
        for r in v.values():
            r.pop("first_stream", None)
    engine.close()
    return {
        "device": torch.cuda.get_device_name(),
        "model": args.model,
        "dtype": str(loaded.dtype),
        "prompt_tokens": args.prompt_tokens,
        "new_tokens": args.tokens,
        "streams": args.streams,
        "command": "python bench/serving.py " + " ".join(sys.argv[1:]),
        "results": results,
        "ratios": figures,
        "swap": {
            "hold_s": hold,
            "modules": observed.modules_matched,
            "served_lane": observed.served_lane,
            "graphs_captured": observed.graphs_captured,
            "canary_logit_max_diff_eager": observed.canary_logit_max_diff,
            "canary_logit_max_diff_served": observed.served_logit_max_diff,
            "canary_logit_tolerance": observed.canary_logit_tolerance,
        },
        "teacher_forced_over_served_stock_tokens": {
            "eager_lane_vs_served_lane": compare(eager_logits, stock_logits, stock),
            "served_swapped_vs_served_stock": compare(swapped_logits, stock_logits, stock),
        },
        "greedy_tokens_agree_for_at_1_stream": {
            "engine_vs_plain_graphs": agree(first["engine"], first["plain_graphs"]),
            "engine_swapped_vs_engine": agree(first["engine_swapped"], first["engine"]),
        },
    }


def plot(result: dict, path: Path) -> None:
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed: no plot", file=sys.stderr)
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    streams = result["streams"]
    lanes = list(result["results"])
    fig, ax = plt.subplots(figsize=(8, 4.5))
    width = 0.8 / len(lanes)
    for i, lane in enumerate(lanes):
        xs = [j + i * width for j in range(len(streams))]
        ax.bar(xs, [result["results"][lane][str(n)]["tokens_per_s"] for n in streams], width, label=lane)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(streams))], [f"{n} streams" for n in streams])
    ax.set_yscale("log")
    ax.set_ylabel("decode tokens/s (all streams)")
    ax.set_title(f"{result['model']} {result['dtype']} on {result['device']}, {result['new_tokens']} new tokens")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-1.5b-shape")
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--tokens", type=int, default=128, help="new tokens per stream")
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--plot-only", type=Path, help="redraw the plot of a result file")
    args = parser.parse_args()
    if args.plot_only:
        result = json.loads(args.plot_only.read_text())
        plot(result, args.plot_only.with_suffix(".png"))
        return 0
    result = json.loads(json.dumps(asyncio.run(run(args))))  # int keys become strings, as in the file
    print(json.dumps(result, indent=2))
    args.out.mkdir(parents=True, exist_ok=True)
    gpu = torch.cuda.get_device_name().split()[-1].lower()
    out = args.out / f"serving_{gpu}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    plot(result, out.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
