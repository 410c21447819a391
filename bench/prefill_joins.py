"""What one join costs the batched lane: prompts prefilled together, by how many and through which path.

Issue 27's TTFT p99 at 16 streams (111-253 ms on the H200, target 100) comes from bursts: at a level's start every
stream arrives at once and one tick admits them all. A join of up to PREFILL_GRAPH_ROWS prompts replays a prefill
graph; a larger one runs eagerly (services/server/batch_decode.py, `prefill_many`). The served sweep's server parts
showed prefill p50 7 ms and p99 87-143 ms. This times `SlotDecoder.prefill_many` on the engine's own decoder,
graphs captured as at load, for joins of k prompts of a given length: as one join (the server's path at
`YANTRA_PREFILL_GROUPS=1`, its default before these figures made it 4), and as the server takes it with
`YANTRA_PREFILL_GROUPS` high enough for k (groups of PREFILL_GRAPH_ROWS, each a graph replay; the decoder's own
`prefill_groups`), so the figures say which is faster at each k and whether the eager path is what a burst waits
for. Each row names the path each way took (no graphs on a CPU: eager both ways).

  python bench/prefill_joins.py --model qwen2.5-1.5b-shape --joins 1 2 4 8 16 32 64 --lengths 64 96 \\
      --out bench/results/prefill_joins_h200.json
  python bench/prefill_joins.py --model tiny-qwen2 --device cpu --reps 2   # a smoke run
  python bench/prefill_joins.py --plot-only bench/results/prefill_joins_h200.json   # its .png again (matplotlib)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.server.batch_decode import PREFILL_GRAPH_ROWS  # noqa: E402
from services.server.engine import Engine  # noqa: E402
from services.server.models import load_model  # noqa: E402


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def time_join(decoder, prompts: list[list[int]], groups: int, reps: int, device: str) -> list[float]:
    """Seconds per join of `prompts` with the decoder's `prefill_groups` at `groups`, `reps` times after one
    untimed pass; the slots are freed after each."""
    decoder.prefill_groups = groups
    out = []
    for rep in range(reps + 1):
        slots = decoder.free_slots()[: len(prompts)]
        _sync(device)
        start = time.perf_counter()
        rows = decoder.prefill_many(slots, prompts)
        rows[-1].float().sum().item()  # the last row's logits on the host, as the batcher's `choose` reads them
        _sync(device)
        if rep:
            out.append(time.perf_counter() - start)
        for slot in slots:
            decoder.release(slot)
    return out


def plot(result: dict, path: Path) -> str:
    """Milliseconds per join against the prompts it holds: one join solid, graph groups dashed, a line a prompt
    length (matplotlib where importable). Returns a note."""
    try:
        import matplotlib
    except ImportError:
        return "matplotlib is not installed: no plot"
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for k, length in enumerate(sorted({r["tokens"] for r in result["rows"]})):
        rows = [r for r in result["rows"] if r["tokens"] == length]
        xs = [r["prompts"] for r in rows]
        ax.plot(xs, [r["one_join_ms"] for r in rows], "o-", color=f"C{k}", label=f"{length} tokens: one join")
        ax.plot(xs, [r["groups_ms"] for r in rows], "x--", color=f"C{k}", label=f"{length} tokens: graph groups of "
                f"{result['group']}")  # fmt: skip
    ticks = sorted({r["prompts"] for r in result["rows"]})
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel("prompts in one join")
    ax.set_ylabel(f"ms per join ({result['figure']})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"{result['model']} on {result['device']}: a burst's prefill")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"wrote {path.name}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen2.5-1.5b-shape")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--joins", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64])
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 96], help="prompt tokens (every prompt)")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--slot-tokens", type=int, default=2048)
    parser.add_argument("--out", type=Path, default=None, help="result JSON; its .png is written beside it")
    parser.add_argument("--plot-only", type=Path, default=None, metavar="FILE", help="draw FILE's .png and stop")
    args = parser.parse_args(argv)
    if args.plot_only is not None:
        try:
            result = json.loads(args.plot_only.read_text())
        except (OSError, ValueError) as exc:
            print(f"cannot read {args.plot_only}: {exc}", file=sys.stderr)
            return 2
        print(plot(result, args.plot_only.with_suffix(".png")))
        return 0

    engine = Engine(load_model(args.model, args.device), slot_tokens=args.slot_tokens)
    decoder = engine.decoder
    if decoder is None:
        print(f"{args.model}: no batched lane ({engine.lane_problem})", file=sys.stderr)
        return 2
    joins = [k for k in args.joins if k <= decoder.slots]
    gen, vocab = torch.Generator().manual_seed(0), int(engine.model.config.vocab_size)
    rows = []
    for length in args.lengths:
        for k in joins:
            prompts = torch.randint(0, vocab, (k, length), generator=gen).tolist()
            most = -(-k // PREFILL_GRAPH_ROWS)  # the prefill groups that take a join of k whole
            one = statistics.median(time_join(decoder, prompts, 1, args.reps, args.device))
            one_path = decoder.prefill_path(prompts)
            grouped = statistics.median(time_join(decoder, prompts, most, args.reps, args.device))
            rows.append({"prompts": k, "tokens": length, "one_join_ms": one * 1e3, "groups_ms": grouped * 1e3,
                         "one_join_path": one_path, "groups_path": decoder.prefill_path(prompts)})  # fmt: skip
            print(f"{k:>3} prompts x {length:>4} tokens: one join {one * 1e3:8.2f} ms ({one_path}), "
                  f"prefill groups {most} {grouped * 1e3:8.2f} ms ({rows[-1]['groups_path']})", flush=True)  # fmt: skip
    device = torch.cuda.get_device_name() if args.device == "cuda" else args.device
    result = {"command": "python " + " ".join([sys.argv[0], *(argv if argv is not None else sys.argv[1:])]),
              "model": args.model, "device": device, "graphs": decoder.graphs, "slots": decoder.slots,
              "group": PREFILL_GRAPH_ROWS, "reps": args.reps, "figure": "median ms per join, logits read back",
              "rows": rows}  # fmt: skip
    engine.close()
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.out}; {plot(result, args.out.with_suffix('.png'))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
