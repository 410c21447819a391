"""A plain MLP's activation (GPT-2's gelu_new) on the GPU, side by side in one run: eager, compile, native, ours.

    python bench/mlp_act.py --out bench/results
    python bench/mlp_act.py --variant mlp_relu2 --out bench/results   # Nemotron's relu²

The op between the two maps of GPT-2's MLP: eager is what HF runs (`NewGELUActivation`: seven torch ops after the
cube, each a pass over the intermediate activations), `torch.compile` of it, native (`F.gelu(approximate="tanh")`:
torch's own fused kernel for the same formula), and the coder's mlp_act template at each config of its search
table (best reported, all kept). Liger has no plain GELU (its GeGLU is the gated op). Shapes: the intermediate
widths of GPT-2 (3,072) and GPT-2 XL (6,400), decode-sized (1 and 64 rows) and prefill-sized (4k and 32k rows).
GPU time per call by CUDA-graph replay over inputs rotated past the L2 (bench/rmsnorm.py's procedure), do_bench's
time beside it, host-inclusive at decode (`host_us`, bench/rmsnorm.py:timings), max |error| against eager in
float32 terms, % of copy. `--variant mlp_relu2`: Nemotron's relu² instead (`ReLUSquaredActivation`: a relu, then
a square, two passes), at the intermediate widths of Nemotron-Mini-4B (9,216) and Nemotron-4-15B (24,576); torch
has no fused op for it, so its peers are eager and `torch.compile`; into mlp_relu2_h200.json.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]
from plot_rows import plot  # noqa: E402
from rmsnorm import L2_BYTES, copy_bandwidth, print_copy_floor, run_meta, timings, with_copy_floor  # noqa: E402

from services.core.kernels import load_kernels, write_source  # noqa: E402
from services.ops import plain_mlp  # noqa: E402
from services.ops.plain_mlp import template  # noqa: E402

SHAPES = {
    "mlp_gelu_tanh": [(1, 3072), (64, 3072), (4096, 3072), (32768, 3072), (1, 6400), (64, 6400), (4096, 6400),
                      (16384, 6400)],
    "mlp_relu2": [(1, 9216), (64, 9216), (4096, 9216), (16384, 9216), (1, 24576), (64, 24576), (4096, 24576)],
}  # fmt: skip
STEMS = {"mlp_gelu_tanh": "mlp_act_h200", "mlp_relu2": "mlp_relu2_h200"}


def implementations(variant: str = "mlp_gelu_tanh"):
    from transformers.activations import NewGELUActivation, ReLUSquaredActivation

    eager = NewGELUActivation() if variant == "mlp_gelu_tanh" else ReLUSquaredActivation()
    impls = {"eager": eager, "torch_compile": torch.compile(eager, dynamic=False)}
    if variant == "mlp_gelu_tanh":
        impls["native"] = lambda x: torch.nn.functional.gelu(x, approximate="tanh")
    ours = {}
    directory = Path(tempfile.mkdtemp())
    for config in template.search_configs(variant):
        plan = template.plan(config)
        kernels = load_kernels(write_source(directory, template.render(config)), [plan.launches[0].kernel])
        ours[f"ours_w{config.num_warps}_b{config.params['block']}"] = plain_mlp.make_op(plan, kernels)
    return impls, ours


def bench_shape(rows: int, width: int, ceiling: float, variant: str = "mlp_gelu_tanh") -> dict:
    dtype = torch.bfloat16
    impls, ours = implementations(variant)
    bytes_moved = plain_mlp.bytes_moved(rows * width, dtype.itemsize)
    copies = max(1, math.ceil(2 * L2_BYTES / (rows * width * dtype.itemsize)))
    inputs = [torch.randn(rows, width, device="cuda", dtype=dtype) for _ in range(min(copies, 64))]
    ref = impls["eager"](inputs[0]).float()
    exact = impls["eager"](inputs[0].double())
    result = {"rows": rows, "width": width, "dtype": str(dtype), "bytes": bytes_moved, "impls": {}}
    with torch.no_grad():
        for name, fn in {**impls, **ours}.items():
            try:
                out = fn(inputs[0])
                figures = timings(fn, inputs, rows)
                graph_us = figures["graph_us"]
                result["impls"][name] = {
                    **figures,
                    "max_abs_err_vs_eager": float((out.float() - ref).abs().max()),
                    "max_abs_err_vs_float64": float((out.double() - exact).abs().max()),
                    "pct_of_copy": 100 * bytes_moved / (graph_us * 1e-6) / ceiling,
                }
            except Exception as exc:
                result["impls"][name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    timed = {k: v for k, v in result["impls"].items() if k.startswith("ours") and "graph_us" in v}
    if timed:
        best = min(timed, key=lambda k: timed[k]["graph_us"])
        base = result["impls"]
        result["ours_best"] = best
        result["ratios"] = {
            f"{n}/ours": base[n]["graph_us"] / base[best]["graph_us"] for n in impls if "graph_us" in base[n]
        }
        peers = [base[n]["graph_us"] for n in impls if "graph_us" in base[n]]
        result["best_peer_over_ours"] = min(peers) / base[best]["graph_us"]
    return with_copy_floor(result, bytes_moved)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("bench/results"), help="where the JSON goes")
    parser.add_argument(
        "--variant", choices=sorted(SHAPES), default="mlp_gelu_tanh", help="GPT-2's gelu_new (default) or relu²"
    )
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench/mlp_act.py needs a CUDA GPU", file=sys.stderr)
        return 2
    ceiling = copy_bandwidth()
    results = [bench_shape(r, w, ceiling, args.variant) for r, w in SHAPES[args.variant]]
    ratios = [r["best_peer_over_ours"] for r in results if r.get("best_peer_over_ours")]
    geomean = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else 0.0
    variant_arg = "" if args.variant == "mlp_gelu_tanh" else f" --variant {args.variant}"
    meta = run_meta(f"python bench/mlp_act.py{variant_arg} --out {args.out}", ceiling)
    args.out.mkdir(parents=True, exist_ok=True)
    payload = {"meta": meta, "summary": {"geomean_best_peer_over_ours": geomean}, "results": results}
    (args.out / f"{STEMS[args.variant]}.json").write_text(json.dumps(payload, indent=1))
    plot(payload, args.out / f"{STEMS[args.variant]}.png", args.variant)
    print(f"copy ceiling {ceiling / 1e9:.0f} GB/s on {meta['gpu']}; GPU us by graph replay (do_bench us), % of copy")
    for r in results:
        cells = []
        for name in ["eager", "torch_compile", "native", r.get("ours_best", "")]:
            row = r["impls"].get(name, {})
            cells.append(
                f"{name[:8]}: {row['graph_us']:6.1f} ({row['us']:5.1f}) {row['pct_of_copy']:3.0f}%"
                if "us" in row
                else f"{name}: -"
            )
        print(f"{r['rows']:>6}x{r['width']:<5} " + "  ".join(cells))
    print(f"geomean best peer / ours: {geomean:.2f}x")
    print_copy_floor(results, lambda r: f"{r['rows']}x{r['width']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
