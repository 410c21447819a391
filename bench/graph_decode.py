"""Batch-1 greedy decode on the GPU: the engine's eager decode against the static-cache CUDA-graph decode
(services/server/graph_decode.py), stock and with the template RMSNorm kernel swapped in (the graph
captured again after the swap). Same model, weights and prompt, one process.

  python bench/graph_decode.py [--model qwen2.5-1.5b-shape] [--tokens 128] [--out bench/results]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.coder.contract import derive_contract  # noqa: E402
from services.coder.templates import rmsnorm  # noqa: E402
from services.core.kernels import candidate_wrapper  # noqa: E402
from services.server.engine import Engine  # noqa: E402
from services.server.graph_decode import GraphDecoder  # noqa: E402
from services.server.hotswap import apply_swap  # noqa: E402
from services.server.introspection import instances_of, introspect_module  # noqa: E402
from services.server.models import load_model  # noqa: E402

PROMPT = "The quick brown fox jumps over the lazy dog. Tell me a story about a small robot that learns to paint."


def timed(fn, repeats: int) -> tuple[float, list[int]]:
    """(median tokens/s over repeats, the tokens of the last repeat)."""
    rates, tokens = [], []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        tokens = fn()
        torch.cuda.synchronize()
        rates.append(len(tokens) / (time.perf_counter() - t0))
    return sorted(rates)[len(rates) // 2], tokens


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-1.5b-shape")
    parser.add_argument("--tokens", type=int, default=128, help="new tokens per request")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args()
    loaded = load_model(args.model, "cuda")
    engine = Engine(loaded)
    ids = engine.encode(PROMPT)
    engine.decode(ids, args.tokens)  # warm-up
    eager, eager_tokens = timed(lambda: engine.decode(ids, args.tokens)[0], args.repeats)
    decoder = GraphDecoder(engine.model, loaded.device, loaded.dtype, len(ids) + args.tokens + 8, engine._cache_kw)
    decoder.decode(ids, args.tokens)  # warm-up and capture
    graphs, graph_tokens = timed(lambda: decoder.decode(ids, args.tokens), args.repeats)

    norm = next(m for m in engine.model.modules() if type(m).__name__.endswith("RMSNorm"))
    contract = derive_contract(introspect_module(norm))
    config = rmsnorm.search_configs()[0]
    entry = candidate_wrapper(Path(tempfile.mkdtemp()), rmsnorm.render(config), rmsnorm.plan(config))
    handle = apply_swap(engine.model, contract, entry)
    decoder.invalidate()
    decoder.decode(ids, args.tokens)  # capture again, the kernel now serving
    swapped, swapped_tokens = timed(lambda: decoder.decode(ids, args.tokens), args.repeats)
    swapped_eager, _ = timed(lambda: engine.decode(ids, args.tokens)[0], max(1, args.repeats // 2))
    handle.revert()

    def agree(a, b):
        return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))

    result = {
        "device": torch.cuda.get_device_name(),
        "model": args.model,
        "dtype": str(loaded.dtype),
        "prompt_tokens": len(ids),
        "new_tokens": args.tokens,
        "command": "python bench/graph_decode.py " + " ".join(sys.argv[1:]),
        "tokens_per_s": {
            "eager_dynamic_cache": eager,
            "graph_static_cache": graphs,
            "graph_static_cache_swapped": swapped,
            "eager_dynamic_cache_swapped": swapped_eager,
        },
        "ratios": {"graphs_vs_eager": graphs / eager, "swapped_graphs_vs_graphs": swapped / graphs},
        "greedy_tokens_agree_for": {
            "graphs_vs_eager": agree(graph_tokens, eager_tokens),
            "swapped_vs_stock_graphs": agree(swapped_tokens, graph_tokens),
        },
        "captures": decoder.captures,
        "patched_modules": len(instances_of(engine.model, contract.target)),
    }
    print(json.dumps(result, indent=2))
    args.out.mkdir(parents=True, exist_ok=True)
    gpu = torch.cuda.get_device_name().split()[-1].lower()  # "h200": results are named for the GPU they ran on
    (args.out / f"graph_decode_{gpu}.json").write_text(json.dumps(result, indent=2) + "\n")
    engine.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
