"""The plot of a rows × width benchmark result: each implementation's % of the measured copy bandwidth per shape.

    python bench/plot_rows.py bench/results/gated_mlp_h200.json [more.json ...]   # writes each .png beside it

No GPU: it reads a result file as bench/gated_mlp.py and bench/mlp_act.py write it (`results`: rows, width, dtype,
`impls` {name: {pct_of_copy, ...}}, `ours_best`; `meta`: gpu, command) and draws the peers and ours (the best config
per shape) side by side. The benchmarks call it after writing their file; run by hand it redraws a committed one.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def plot(payload: dict, path: Path, op: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = payload["results"]
    peers = [n for n in results[0]["impls"] if not n.startswith("ours")]
    names = [*peers, "ours"]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.8 / len(names)
    for k, name in enumerate(names):
        values = []
        for r in results:
            key = r.get("ours_best") if name == "ours" else name
            values.append(r["impls"].get(key, {}).get("pct_of_copy", 0) if key else 0)
        offsets = [i + (k - (len(names) - 1) / 2) * width for i in range(len(results))]
        ax.bar(offsets, values, width, label=name)
    ax.set_xticks(range(len(results)), [f"{r['rows']}x{r['width']}" for r in results])
    ax.set_ylabel("% of measured copy bandwidth")
    dtype = results[0]["dtype"].removeprefix("torch.")
    ax.set_title(f"{op} {dtype} on {payload['meta'].get('gpu', '?')} (GPU time by CUDA-graph replay)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", type=Path, help="result .json files (each .png is written beside it)")
    args = parser.parse_args()
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("bench/plot_rows.py needs matplotlib (pip install matplotlib)", file=sys.stderr)
        return 2
    for path in args.files:
        try:
            payload = json.loads(path.read_text())
            plot(payload, path.with_suffix(".png"), path.stem.removesuffix("_h200"))
        except (OSError, ValueError, KeyError, IndexError) as exc:
            print(f"{path}: not a rows x width result ({type(exc).__name__}: {exc})", file=sys.stderr)
            return 1
        print(f"wrote {path.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
