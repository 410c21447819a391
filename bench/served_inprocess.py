"""The in-process figures that sit beside bench/served_load.py's: the server's engine driven directly (no gRPC, no
second process) and HF eager `generate`, at the same stream counts and mean lengths, on the GPU.

It runs two of bench/serving.py's lanes (its `engine_streams` and `hf_eager`, unchanged) and none of its swap or
plain-graph work, so that it fits beside a served run: every stream's prompt is --prompt-tokens long and asks
--tokens new tokens (served_load draws lengths around the same means).

  python bench/served_inprocess.py --model qwen2.5-1.5b-shape --streams 1 16 64 --prompt-tokens 64 --tokens 128 \\
      --out /tmp/inprocess.json
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

import serving  # noqa: E402  (bench/serving.py: its lanes, as they are)
import torch  # noqa: E402

from services.server.engine import Engine  # noqa: E402
from services.server.models import load_model  # noqa: E402


async def run(args) -> dict:
    t0 = time.perf_counter()
    loaded = load_model(args.model, "cuda")
    engine = Engine(loaded, slots=max(args.streams))
    loaded_s = time.perf_counter() - t0
    lanes: dict[str, list[dict]] = {"engine": [], "hf_eager": []}
    try:
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
    return {
        "command": "python bench/served_inprocess.py " + shlex.join(sys.argv[1:]),
        "gpu": torch.cuda.get_device_name(),
        "model": args.model,
        "dtype": str(loaded.dtype).removeprefix("torch."),
        "prompt_tokens": args.prompt_tokens,
        "new_tokens": args.tokens,
        "load_s": loaded_s,
        "wall_s": time.perf_counter() - t0,
        "note": "fixed lengths (the served run's means); engine: all streams start together after a warm-up round; "
        "ttft_s is the median over streams; hf_eager: one padded-free batch, ttft_s one prefill + first token",
        "lanes": {k: v for k, v in lanes.items() if v},
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="qwen2.5-1.5b-shape")
    p.add_argument("--streams", type=int, nargs="+", default=[1, 16, 64])
    p.add_argument("--prompt-tokens", type=int, default=64)
    p.add_argument("--tokens", type=int, default=128, help="new tokens per stream")
    p.add_argument("--no-hf-eager", action="store_true", help="the engine's lane only")
    p.add_argument("--out", type=Path, required=True, help="the result file (.json)")
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("served_inprocess: needs a GPU (bench/serving.py's lanes are CUDA-only)", file=sys.stderr)
        return 2
    result = asyncio.run(run(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
