"""How many operators one decode step of a preset issues, per layer: the count a launch-bound step pays for.

A decode step at a few rows is bound by how many kernels it launches, not by the bytes it moves (the engine is 0.95
of HF's own static-cache CUDA graphs on the H200, bench/results/serving_h200.json). So two architectures of one size
step at speeds in the ratio of their operator counts. This counts the top-level aten operators of one cached decode
forward with torch.profiler, on a CPU (the count is the model code's, not the device's), and divides by the layers.

  python bench/decode_ops.py [--models tiny-qwen2 tiny-gemma3 ...] [--out bench/results/decode_ops_cpu.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from services.server.models import load_model  # noqa: E402

PROMPT = [5, 6, 7, 8]


def top_level_ops(model: torch.nn.Module) -> int:
    """aten operators one decode step (one token after a 4-token prompt, over the cache) calls from model code."""
    with torch.inference_mode():
        cache = model(torch.tensor([PROMPT]), use_cache=True).past_key_values
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            model(torch.tensor([[9]]), past_key_values=cache, use_cache=True)
    aten = [e for e in prof.events() if e.name.startswith("aten::")]
    return sum(1 for e in aten if e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::"))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=["tiny-qwen2", "tiny-gemma3"], help="presets; the first is the base")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "decode_ops_cpu.json"))
    args = p.parse_args()
    rows = {}
    for name in args.models:
        model = load_model(name, "cpu").model
        layers = int(model.config.num_hidden_layers)
        ops = top_level_ops(model)
        rows[name] = {"layers": layers, "ops_per_step": ops, "ops_per_layer": round(ops / layers, 1)}
        print(f"{name}: {ops} top-level aten ops a decode step, {layers} layers: {ops / layers:.1f} a layer")
    first = rows[args.models[0]]["ops_per_step"]
    for name in args.models[1:]:
        rows[name]["over_first"] = round(rows[name]["ops_per_step"] / first, 2)
    command = "python bench/decode_ops.py " + " ".join(sys.argv[1:])
    result = {"command": command.strip(), "device": "cpu", "models": rows}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
