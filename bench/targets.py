"""Where each op family stands against the op-families targets, read from the committed benchmark results.

    python bench/targets.py [--results bench/results] [--out bench/results/targets_h200.json]

No GPU: it reads each family's `*_h200.json` (RoPE's partial variants apart; each made by its own benchmark,
bench/README.md) and, per family, puts side by side what was measured and the most any kernel could have reached:
- `geomean_best_peer_over_ours`: the fastest correct peer's GPU time over ours (the best config per shape),
  geomean over shapes (target >= 1.15), and the slowest shape against its best peer (target >= 1);
- `bound_geomean`: the same geomean with ours replaced by a copy of the same bytes (the fastest of torch's copy
  and an elementwise pass moving exactly the bytes the call moves, timed the same way in the same run). A pass
  that reads and writes those bytes does not beat that copy by more than noise, so this is the ceiling of the
  geomean for any kernel of the op's contract: where it is below 1.15 the target cannot be met by a kernel, only
  by moving fewer bytes (fusing the op into a neighbour);
- `one_config`: the same geomean for the one config of ours that scores best over all shapes, what a candidate
  without a dispatch by size reaches (the first figure takes each shape's best config, which only a dispatch
  realises: the norms' templates dispatch by row count, the others do not yet);
- prefill (>= 1,024 rows) as % of a same-size copy (target >= 85%);
- decode (<= 64 rows) host-inclusive: the best peer's time per call over ours, launch path included (`host_us`:
  2,000 back-to-back calls synchronised around them, bench/rmsnorm.py:timings; results made before it read
  do_bench's median, `us`, which times the host only when it outlasts its cache flush and is bimodal at decode).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

FAMILIES = {  # family: its result file (bench/README.md names the command that made each)
    "layernorm": "layernorm_h200.json",
    "rmsnorm": "rmsnorm_h200.json",
    "residual add + rmsnorm": "add_norm_h200.json",
    "gated act·mul": "gated_mlp_h200.json",
    "plain mlp gelu_new": "mlp_act_h200.json",
    "plain mlp relu²": "mlp_relu2_h200.json",
    "rope": "rope_h200.json",
    "rope, glm pairs (partial)": "rope_pairs_partial_h200.json",
    "rope, gpt-neox halves (partial)": "rope_half_partial_h200.json",
    "rope, cohere pairs (interleaved)": "rope_interleaved_h200.json",
}
DECODE_ROWS = 64
PREFILL_ROWS = 1024
TARGET_GEOMEAN = 1.15


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def _rows(result: dict) -> int:
    return int(result.get("rows", result.get("seq", 0)))


def _label(result: dict) -> str:
    if "seq" in result:
        return f"{result['model']} {result['layout']} {result['seq']} positions"
    return f"{result['rows']}x{result['width']}"


def _host_us(impl: dict) -> float | None:
    return impl.get("host_us", impl.get("us"))


def shape_figures(result: dict) -> dict:
    """One shape's figures: ours (the best config by GPU time), the best correct peer, the same-size copy."""
    impls = result["impls"]
    ours = {k: v for k, v in impls.items() if k.startswith("ours") and v.get("graph_us")}
    peers = {
        k: v for k, v in impls.items() if not k.startswith("ours") and v.get("graph_us") and v.get("correct", True)
    }
    best = min(ours, key=lambda k: ours[k]["graph_us"])
    peer = min(peers, key=lambda k: peers[k]["graph_us"])
    ours_us, peer_us = ours[best]["graph_us"], peers[peer]["graph_us"]
    copy_us = ours_us * ours[best]["pct_of_same_size_copy"] / 100
    figures = {
        "shape": _label(result),
        "rows": _rows(result),
        "ours": best,
        "ours_us": ours_us,
        "best_peer": peer,
        "best_peer_us": peer_us,
        "same_size_copy_us": copy_us,
        "best_peer_over_ours": peer_us / ours_us,
        "best_peer_over_copy": peer_us / copy_us,
        "pct_of_same_size_copy": 100 * copy_us / ours_us,
    }
    host = {k: _host_us(v) for k, v in {**peers, best: ours[best]}.items() if _host_us(v)}
    if best in host and len(host) > 1:
        fastest = min((k for k in host if k != best), key=host.get)
        figures.update(host_best_peer=fastest, host_best_peer_over_ours=host[fastest] / host[best])
    return figures


def one_config(results: list[dict], shapes: list[dict]) -> dict:
    """The config of ours with the best geomean of best peer over it across every shape (configs timed at every
    shape only), and that geomean; `shapes` are the results' shape_figures."""
    configs = set.intersection(
        *({k for k, v in r["impls"].items() if k.startswith("ours") and v.get("graph_us")} for r in results)
    )
    scores = {
        name: geomean([s["best_peer_us"] / r["impls"][name]["graph_us"] for s, r in zip(shapes, results, strict=True)])
        for name in configs
    }
    best = max(sorted(scores), key=scores.get)
    return {"config": best, "geomean_best_peer_over_it": scores[best]}


def family_figures(results: list[dict]) -> dict:
    """A family's standing against the targets (the module docstring), from its benchmark's result rows."""
    shapes = [shape_figures(r) for r in results]
    slowest = min(shapes, key=lambda s: s["best_peer_over_ours"])
    prefill = [s["pct_of_same_size_copy"] for s in shapes if s["rows"] >= PREFILL_ROWS]
    host = [
        s["host_best_peer_over_ours"] for s in shapes if s["rows"] <= DECODE_ROWS and "host_best_peer_over_ours" in s
    ]
    return {
        "geomean_best_peer_over_ours": geomean([s["best_peer_over_ours"] for s in shapes]),
        "bound_geomean": geomean([s["best_peer_over_copy"] for s in shapes]),
        "one_config": one_config(results, shapes),
        "slowest": {k: slowest[k] for k in ("shape", "best_peer", "best_peer_over_ours")},
        "prefill_pct_of_same_size_copy": [min(prefill), max(prefill)] if prefill else [],
        "decode_host_geomean_best_peer_over_ours": geomean(host) if host else None,
        "shapes": shapes,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=Path("bench/results"), help="where the result files are")
    parser.add_argument("--out", type=Path, default=Path("bench/results/targets_h200.json"))
    args = parser.parse_args()
    report, missing = {}, []
    for family, name in FAMILIES.items():
        path = args.results / name
        if not path.is_file():
            missing.append(str(path))
            continue
        data = json.loads(path.read_text())
        report[family] = {"file": name, "measured": data["meta"].get("when", ""), **family_figures(data["results"])}
    if missing:
        print(f"no result file: {', '.join(missing)} (run the family's benchmark on the GPU: bench/README.md)")
        return 2
    args.out.write_text(json.dumps({"command": "python bench/targets.py", "families": report}, indent=1) + "\n")
    print("| family | geomean best peer / ours | one config's | most any kernel reaches (same-size copy) | slowest "
          "shape vs best peer | prefill % of a same-size copy | decode host-inclusive best peer / ours |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for family, f in report.items():
        slow, pre, host = f["slowest"], f["prefill_pct_of_same_size_copy"], f["decode_host_geomean_best_peer_over_ours"]
        one = f["one_config"]
        print(
            f"| {family} | {f['geomean_best_peer_over_ours']:.2f} | {one['geomean_best_peer_over_it']:.2f} "
            f"({one['config']}) | {f['bound_geomean']:.2f} | "
            f"{slow['best_peer_over_ours']:.3f} ({slow['best_peer']}, {slow['shape']}) | "
            f"{pre[0]:.0f}–{pre[1]:.0f}% | {'-' if host is None else f'{host:.2f}'} |"
        )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
