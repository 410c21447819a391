"""The rotary embedding (RoPE) on the GPU, side by side in one run: eager, torch.compile, Liger, ours.

    python bench/rope.py --out bench/results            # every shape, both q/k layouts
    python bench/rope.py --quick --out /tmp/rope        # 1 and 4,096 positions, transposed views only
    python bench/rope.py --check                        # correctness only, one small shape (runs on a CPU too)
    python bench/rope.py --variant rope_pairs_partial --out bench/results   # GLM's: pairs over half the head
    python bench/rope.py --variant rope_half_partial --out bench/results    # GPT-NeoX's: halves of a quarter
    python bench/rope.py --variant rope_interleaved --out bench/results     # Cohere's: pairs over the head
    python bench/rope.py --variant rope_half_angles --out bench/results     # GPT-OSS's: one angle a pair

The op is HF's `apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)` (transformers' Qwen2 modeling file,
`rotate_half` layout: x·cos + (-x2, x1)·sin over the two halves of the head dimension), bf16, q of
(batch, q heads, positions, head_dim), k of (batch, kv heads, positions, head_dim), cos and sin of
(batch, positions, head_dim), as attention passes them. Side by side: eager (the HF function itself: five
kernels a tensor), `torch.compile` of it (dynamic=False, compiled afresh for every shape), Liger 0.8.5
(`liger_rotary_pos_emb`, what its HF patch installs, through its backend dispatcher, and
`LigerRopeFunction.apply` directly: one kernel over q and k, **in place**), and the coder's rotary template
(`services/ops/rotary/template.py`) at every config of its search table through the family's wrapper
(`services/ops/rotary.py`: one launch over q and k, new contiguous outputs); the best config is reported, all
are kept. Shapes: Qwen2.5-1.5B's attention (12 q heads, 2 kv heads, head_dim 128) and Llama-3-8B's (32 and 8,
128), batch 1, decode-sized (1, 64) and prefill-sized (1,024, 4,096, 32,768) positions. Two layouts of q and k:
`transposed` (the projections' (batch, positions, heads·head_dim) output viewed and transposed: what attention
passes) and `contiguous` ((batch, heads, positions, head_dim) contiguous). Cos and sin are HF's: cat(f, f) of
the angles at positions 1,000.., cast to bf16. `--variant rope_pairs_partial` times GLM's function instead
(transformers' GLM modeling file: (even, odd) pairs over the first rotary_dim of the head, the rest passed
through) at GLM-4-9B's attention (32 q heads, 2 kv heads, head_dim 128, half of it rotated), cos and sin of
(batch, positions, 64); `--variant rope_half_partial` GPT-NeoX's (rotate_half over the first rotary_dim, the rest
passed through) at Pythia-2.8B's (32 heads of 80, 20 rotated); `--variant rope_interleaved` Cohere's ((even, odd)
pairs over the whole head in fp32, cos and sin with each angle twice in a row) at Command R's (64 heads of 128);
`--variant rope_half_angles` GPT-OSS's (rotate_half, cos and sin of one angle a pair) at GPT-OSS-20B's (64 q heads,
8 kv heads of 64). Liger has none of these ops, so their peers are eager and torch.compile; results go to
<variant>_h200.json/.png.

Every implementation is checked against eager before it is timed (ours is expected bit-exact; max abs error
of every one is in the JSON). GPU time per call by CUDA-graph replay over inputs rotated past the L2
(bench/rmsnorm.py's procedure: a graph of 20 calls, median of 10 replays); at decode sizes also host-inclusive
time per call (back-to-back calls, synchronised before and after). Bytes moved as the family counts them
(q and k read and written, cos and sin read: `services.ops.rotary.bytes_moved`); % of the copy bandwidth
measured in the same run. Ratios are `<peer>/ours`: the peer's time over ours (above 1: ours is faster);
`best_peer/ours` against the fastest correct peer at each shape, and its geomean over shapes. Results go to
<out>/rope_h200.json and a plot to <out>/rope_h200.png (when matplotlib is importable). Exit status 1 when a
config of ours was not bit-exact with eager, 2 without a CUDA GPU (except --check).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]
from rmsnorm import L2_BYTES, copy_bandwidth, graph_time_us, host_us, print_copy_floor, run_meta, with_copy_floor  # noqa: E402

from services.core.kernels import candidate_wrapper  # noqa: E402
from services.core.tolerances import within  # noqa: E402
from services.ops import rotary  # noqa: E402
from services.ops.rotary import template  # noqa: E402

# variant -> (the HF function timed, name -> (q heads, kv heads, head_dim, rope theta, rotary dim), result stem)
VARIANTS = {
    "rope_half": (
        "transformers.models.qwen2.modeling_qwen2.apply_rotary_pos_emb",
        {"qwen2.5-1.5b": (12, 2, 128, 1_000_000.0, 128), "llama-3-8b": (32, 8, 128, 500_000.0, 128)},
        "rope_h200",
    ),
    "rope_pairs_partial": (
        "transformers.models.glm.modeling_glm.apply_rotary_pos_emb",
        {"glm-4-9b": (32, 2, 128, 10_000.0, 64)},
        "rope_pairs_partial_h200",
    ),
    "rope_half_partial": (
        "transformers.models.gpt_neox.modeling_gpt_neox.apply_rotary_pos_emb",
        {"pythia-2.8b": (32, 32, 80, 10_000.0, 20)},
        "rope_half_partial_h200",
    ),
    "rope_interleaved": (
        "transformers.models.cohere.modeling_cohere.apply_rotary_pos_emb",
        {"command-r-35b": (64, 64, 128, 8_000_000.0, 128)},
        "rope_interleaved_h200",
    ),
    "rope_half_angles": (
        "transformers.models.gpt_oss.modeling_gpt_oss.apply_rotary_pos_emb",
        {"gpt-oss-20b": (64, 8, 64, 150_000.0, 64)},
        "rope_half_angles_h200",
    ),
}
MODELS = {name: shape for _, models, _ in VARIANTS.values() for name, shape in models.items()}
DECODE_SEQS = (1, 64)
PREFILL_SEQS = (1024, 4096, 32768)
QUICK_SEQS = (1, 4096)
LAYOUTS = ("transposed", "contiguous")
BATCH = 1
START = 1000  # the first position: cos and sin of position 0 are 1 and 0, which would check nothing
MAX_COPIES = 64  # input sets rotated through (bench/gated_mlp.py's cap)
PEERS_PLOTTED = ("eager", "torch_compile", "liger")
CHECK_SHAPE = (2, 4, 2, 5, 128)  # batch, q heads, kv heads, positions, head_dim of --check


def hf_rope(variant: str = "rope_half"):
    """The HF function the modeling file calls: Qwen2's apply_rotary_pos_emb (Llama's is the same), or GLM's."""
    import importlib

    module, name = VARIANTS[variant][0].rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


def rope_inputs(
    heads_q, heads_k, seq, dim, theta, layout, dtype, device, seed=0, batch=BATCH, rotary_dim=None, interleaved=False,
    angles=False,
):  # fmt: skip
    """(q, k, cos, sin) as attention passes them; `layout` "transposed": q and k are (batch, seq, heads·dim)
    projection outputs viewed as (batch, heads, seq, dim), "contiguous": (batch, heads, seq, dim) tensors; cos
    and sin of `rotary_dim` (the head's by default), as the model's rotary embedding makes them (`interleaved`:
    each angle twice in a row, as Cohere's does; `angles`: one angle a pair, half as wide, as GPT-OSS's; else
    cat(f, f))."""
    gen = torch.Generator(device=device).manual_seed(seed)

    def heads_major(heads):
        if layout == "transposed":
            proj = torch.randn(batch, seq, heads * dim, generator=gen, device=device, dtype=dtype)
            return proj.view(batch, seq, heads, dim).transpose(1, 2)
        return torch.randn(batch, heads, seq, dim, generator=gen, device=device, dtype=dtype)

    q, k = heads_major(heads_q), heads_major(heads_k)
    # HF's rotary embedding: angles in fp32, emb = cat(freqs, freqs), cos/sin cast to the activations' dtype
    r = rotary_dim or dim
    inv_freq = 1.0 / theta ** (torch.arange(0, r, 2, device=device, dtype=torch.float32) / r)
    positions = torch.arange(START, START + seq, device=device, dtype=torch.float32)
    freqs = positions[:, None] * inv_freq[None]
    emb = torch.repeat_interleave(freqs, 2, dim=-1) if interleaved else torch.cat((freqs, freqs), dim=-1)
    emb = freqs if angles else emb
    cos = emb.cos().to(dtype)[None].expand(batch, seq, emb.shape[-1]).contiguous()
    sin = emb.sin().to(dtype)[None].expand(batch, seq, emb.shape[-1]).contiguous()
    return q, k, cos, sin


def input_bytes(inputs) -> int:
    return sum(t.numel() * t.element_size() for t in inputs)


def ours_impls(variant: str = "rope_half") -> dict:
    """name -> rope(q, k, cos, sin) for every config of the template's search table, and one candidate dispatching
    by position count (`ours_dispatch`: the per-head blocks of 16 up to 4,096 positions, the table's first config
    beyond: what one deployed candidate reaches where the best config differs by size), through the family's
    wrapper (services.ops.rotary.make_forward: ENTRYPOINT `rope`, ENTRY_PARAMS (q, k, cos, sin, unsqueeze_dim))."""
    ours = {}
    table = template.search_configs(variant)
    blocks = next(c for c in table if c.params.get("positions") == 16)
    for config in [*table, template.combine(blocks, table[0])]:
        entry = candidate_wrapper(Path(tempfile.mkdtemp()), template.render(config), template.plan(config))
        heads, together = config.params["heads"] or "all", "_qk" if config.params["together"] else ""
        positions = config.params.get("positions", 0)
        name = f"ours_w{config.num_warps}_p{positions}" if positions else f"ours_w{config.num_warps}_h{heads}"
        ours["ours_dispatch" if not template.plain(config) else name + together] = entry
    return ours


def peer_impls(device: str, variant: str = "rope_half") -> dict:
    """name -> fn(q, k, cos, sin) -> (q_out, k_out): eager always; torch.compile and (rope_half) Liger on a CUDA
    device only.
    torch.compile is made afresh (dynamo reset) so every shape and layout gets its own dynamic=False graph
    without running into dynamo's recompile limit."""
    eager = hf_rope(variant)
    peers = {"eager": eager}
    if device != "cuda":
        return peers
    torch._dynamo.reset()
    peers["torch_compile"] = torch.compile(eager, dynamic=False)
    if variant != "rope_half":
        return peers  # Liger rotates halves (rotate_half) over the whole head only
    try:
        from liger_kernel.ops.rope import LigerRopeFunction
        from liger_kernel.transformers.rope import liger_rotary_pos_emb

        # Liger takes q and k of (batch, heads, seq, dim) and cos/sin of (1 or batch, seq, dim) as they come: it
        # transposes q and k back to (batch, seq, heads, dim), makes that contiguous (a no-op for the projections'
        # transposed views, a copy inside the call for head-major tensors) and rotates it IN PLACE, returning
        # views of it. It reads only the first half of cos and sin (it assumes cat(f, f)).
        peers["liger"] = liger_rotary_pos_emb
        peers["liger_function"] = lambda q, k, cos, sin: LigerRopeFunction.apply(q, k, cos, sin)
    except Exception as exc:  # reported, not fatal: the comparison names what was missing
        print(f"liger unavailable: {exc}")
    return peers


def implementations(device: str, ours: dict | None = None, variant: str = "rope_half") -> tuple[dict, dict]:
    """(peers, ours), each name -> fn(q, k, cos, sin) -> (q_embed, k_embed)."""
    return peer_impls(device, variant), ours if ours is not None else ours_impls(variant)


def _clone(inputs):
    return tuple(t.clone() for t in inputs)  # keeps a transposed view's strides (preserve_format)


def check(impls: dict, sample) -> dict:
    """name -> {max_abs_err, bit_exact, correct} (or {error}) against eager, each on fresh clones of `sample`:
    Liger rotates its inputs in place, so no implementation sees another's leftovers."""
    ref = impls["eager"](*_clone(sample))
    checks = {}
    with torch.no_grad():
        for name, fn in impls.items():
            try:
                out = fn(*_clone(sample))
                pairs = list(zip(out, ref, strict=True))
                verdicts = [within(o, r) for o, r in pairs]
                checks[name] = {
                    "max_abs_err": max(v[1] for v in verdicts),
                    "bit_exact": all(o.dtype == r.dtype and o.shape == r.shape and torch.equal(o, r) for o, r in pairs),
                    "correct": all(v[0] for v in verdicts),
                }
            except Exception as exc:
                checks[name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    return checks


def _best(entries: dict, names, figure: str) -> str | None:
    ok = [n for n in names if entries.get(n, {}).get("correct") and figure in entries[n]]
    return min(ok, key=lambda n: entries[n][figure]) if ok else None


def bench_shape(
    model: str, seq: int, layout: str, ceiling: float, ours: dict, device: str = "cuda", variant: str = "rope_half"
) -> dict:
    heads_q, heads_k, dim, theta, rotary_dim = MODELS[model]
    dtype = torch.bfloat16
    result = {
        "model": model, "batch": BATCH, "seq": seq, "heads_q": heads_q, "heads_k": heads_k, "head_dim": dim,
        "rotary_dim": rotary_dim, "layout": layout, "dtype": str(dtype), "impls": {},
    }  # fmt: skip
    try:
        peers = peer_impls(device, variant)
        pairs, angles = variant == "rope_interleaved", variant in rotary.ANGLE_VARIANTS
        sample = rope_inputs(
            heads_q, heads_k, seq, dim, theta, layout, dtype, device, rotary_dim=rotary_dim, interleaved=pairs,
            angles=angles,
        )  # fmt: skip
        q, k, cos, _ = sample
        bytes_moved = rotary.bytes_moved(q.numel(), k.numel(), cos.numel(), dtype.itemsize)
        copies = min(MAX_COPIES, max(1, math.ceil(2 * L2_BYTES / input_bytes(sample))))
        inputs = [sample] + [
            rope_inputs(
                heads_q,
                heads_k,
                seq,
                dim,
                theta,
                layout,
                dtype,
                device,
                seed,
                rotary_dim=rotary_dim,
                interleaved=pairs,
                angles=angles,
            )  # fmt: skip
            for seed in range(1, copies)
        ]
        impls = {**peers, **ours}
        entries = check(impls, sample)  # before anything is timed (Liger's timing rotates the inputs in place)
    except torch.cuda.OutOfMemoryError as exc:  # 32,768 positions "if memory allows"
        result["skipped"] = f"out of memory: {exc}"[:300]
        torch.cuda.empty_cache()
        return result
    result["bytes"] = bytes_moved
    with torch.no_grad():
        for name, fn in impls.items():
            entry = entries[name]
            if "error" in entry:
                continue
            try:
                call = (lambda f: lambda t: f(*t))(fn)
                graph_us = graph_time_us(call, inputs)
                entry.update(
                    graph_us=graph_us,
                    gb_per_s=bytes_moved / (graph_us * 1e-6) / 1e9,
                    pct_of_copy=100 * bytes_moved / (graph_us * 1e-6) / ceiling,
                )
                if seq in DECODE_SEQS:
                    entry["host_us"] = host_us(call, inputs)
            except Exception as exc:
                entry["error"] = f"{type(exc).__name__}: {exc}"[:300]
    result["impls"] = entries
    best = _best(entries, ours, "graph_us")
    best_peer = _best(entries, peers, "graph_us")
    result["ours_best"], result["best_peer"] = best, best_peer
    if best:
        ours_us = entries[best]["graph_us"]
        ratios = {f"{n}/ours": entries[n]["graph_us"] / ours_us for n in peers if "graph_us" in entries[n]}
        if best_peer:
            ratios["best_peer/ours"] = entries[best_peer]["graph_us"] / ours_us
        result["ratios"] = ratios
        if seq in DECODE_SEQS and "host_us" in entries[best]:
            host = entries[best]["host_us"]
            result["host_ratios"] = {
                f"{n}/ours": entries[n]["host_us"] / host for n in peers if "host_us" in entries[n]
            }
    del inputs, sample
    torch.cuda.empty_cache()
    return with_copy_floor(result, bytes_moved)


def geomean(values: list[float]) -> float | None:
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else None


def summarise(results: list[dict], ours: dict) -> dict:
    """Geomeans over the timed shapes (all, and by layout) of best_peer/ours and of each <peer>/ours; how often each
    config of ours was the best; any shape where a config of ours was not bit-exact with eager."""
    timed = [r for r in results if "ratios" in r]

    def gm(key: str, rows: list[dict]) -> float | None:
        return geomean([r["ratios"][key] for r in rows if key in r["ratios"]])

    best_counts: dict[str, int] = {}
    for r in timed:
        best_counts[r["ours_best"]] = best_counts.get(r["ours_best"], 0) + 1
    return {
        "geomean_best_peer_over_ours": gm("best_peer/ours", timed),
        "geomean_best_peer_over_ours_by_layout": {
            layout: gm("best_peer/ours", [r for r in timed if r["layout"] == layout])
            for layout in LAYOUTS
            if any(r["layout"] == layout for r in timed)
        },
        "geomean_by_peer": {key: gm(key, timed) for key in sorted({k for r in timed for k in r["ratios"]})},
        "ours_best_config_count": best_counts,
        "ours_not_bit_exact": [
            f"{r['model']} S={r['seq']} {r['layout']} {name}"
            for r in results
            for name in ours
            if name in r["impls"] and not r["impls"][name].get("bit_exact")
        ],
    }


def plot(results: list[dict], path: Path, op: str = "apply_rotary_pos_emb") -> None:
    try:
        import matplotlib
    except ImportError:
        print(f"matplotlib not importable: no plot written ({path.name})")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layouts = [lay for lay in LAYOUTS if any(r["layout"] == lay for r in results)]
    fig, axes = plt.subplots(len(layouts), 1, figsize=(11, 4 * len(layouts)), squeeze=False)
    names = [*PEERS_PLOTTED, "ours"]
    width = 0.8 / len(names)
    for ax, layout in zip(axes[:, 0], layouts, strict=True):
        rows = [r for r in results if r["layout"] == layout]
        for j, name in enumerate(names):
            vals = []
            for r in rows:
                key = r.get("ours_best") if name == "ours" else name
                vals.append(r["impls"].get(key, {}).get("pct_of_copy", 0) if key else 0)
            ax.bar([i + (j - (len(names) - 1) / 2) * width for i in range(len(rows))], vals, width, label=name)
        ax.set_xticks(range(len(rows)), [f"{r['model'].split('-')[0]}\nS={r['seq']}" for r in rows])
        ax.set_ylabel("% of measured copy bandwidth")
        ax.set_title(f"q/k {layout}")
        ax.set_ylim(0, 1.2 * max([1.0, *ax.get_ylim()[1:]]))  # room for the legend above the bars
        ax.legend(fontsize=8, ncol=len(names), loc="upper left")
    gpu = torch.cuda.get_device_name()
    fig.suptitle(f"RoPE ({op}) bf16 on {gpu}: GPU time by CUDA-graph replay, rotating buffers")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def check_small(device: str, variant: str = "rope_half") -> list[dict]:
    """Build the implementations and check one small shape in both layouts against eager: bf16 on a GPU (every
    peer); on a CPU fp32 and bf16 with ours in the Triton interpreter (bf16 casts rounding to nearest even, as a
    GPU's do: services.core.interpreter_rounding), eager only beside it (no torch.compile, no Liger)."""
    if device == "cpu":
        from services.core import interpreter_rounding

        interpreter_rounding.install()
        dtypes = (torch.float32, torch.bfloat16)
    else:
        dtypes = (torch.bfloat16,)
    batch, heads_q, heads_k, seq, dim = CHECK_SHAPE
    rotary_dim = dim // 2 if variant in rotary.PARTIAL_VARIANTS else dim
    ours = ours_impls(variant)
    out = []
    for dtype in dtypes:
        for layout in LAYOUTS:
            peers, _ = implementations(device, ours, variant)
            sample = rope_inputs(
                heads_q,
                heads_k,
                seq,
                dim,
                10_000.0,
                layout,
                dtype,
                device,
                batch=batch,
                rotary_dim=rotary_dim,
                interleaved=variant == "rope_interleaved",
                angles=variant in rotary.ANGLE_VARIANTS,
            )
            assert layout == "contiguous" or not sample[0].is_contiguous()
            shape = {"batch": batch, "heads_q": heads_q, "heads_k": heads_k, "seq": seq, "head_dim": dim}
            out.append({**shape, "layout": layout, "dtype": str(dtype), "impls": check({**peers, **ours}, sample)})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("bench/results"), help="where the result .json/.png go")
    parser.add_argument(
        "--variant",
        choices=sorted(VARIANTS),
        default="rope_half",
        help="Qwen's rotate_half (default), GLM's, GPT-NeoX's or Cohere's",
    )
    parser.add_argument("--quick", action="store_true", help=f"positions {QUICK_SEQS} only, transposed views only")
    parser.add_argument(
        "--layout",
        choices=(*LAYOUTS, "both"),
        default=None,
        help="q/k layout(s) to time (default: both; --quick: transposed)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="check correctness on one small shape and exit (no timing; CPU: interpreter)",
    )
    args = parser.parse_args()
    if args.check:
        device = "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cpu":
            os.environ.setdefault("TRITON_INTERPRET", "1")  # read when the kernels are loaded, below
        checks = check_small(device, args.variant)
        bad = []
        for c in checks:
            for name, v in c["impls"].items():
                line = v.get("error") or f"max abs err {v['max_abs_err']:.3g}, bit-exact {v['bit_exact']}"
                print(f"{device} {c['dtype']:>14} {c['layout']:>10} {name:>15}: {line}")
                if name.startswith("ours") and not v.get("bit_exact"):
                    bad.append(f"{c['dtype']} {c['layout']} {name}")
        if bad:
            print(f"ours not bit-exact with eager: {', '.join(bad)}", file=sys.stderr)
            return 1
        return 0
    if not torch.cuda.is_available():
        print(
            "bench/rope.py needs a CUDA GPU (torch.cuda.is_available() is False); --check runs on a CPU",
            file=sys.stderr,
        )
        return 2
    seqs = QUICK_SEQS if args.quick else DECODE_SEQS + PREFILL_SEQS
    layout = args.layout or ("transposed" if args.quick else "both")
    layouts = LAYOUTS if layout == "both" else (layout,)
    op, models, stem = VARIANTS[args.variant]
    ceiling = copy_bandwidth()
    ours = ours_impls(args.variant)
    results = []
    for model in models:
        for seq in seqs:
            for lay in layouts:
                results.append(bench_shape(model, seq, lay, ceiling, ours, variant=args.variant))
                r = results[-1]
                print(
                    f"  {model} S={seq} {lay}: best ours {r.get('ours_best')}, best peer {r.get('best_peer')}",
                    flush=True,
                )
    try:
        from importlib.metadata import version

        liger = version("liger-kernel")
    except Exception:
        liger = None
    import transformers

    meta = run_meta(
        "python bench/rope.py " + " ".join(sys.argv[1:]),
        ceiling,
        op=f"{op} (unsqueeze_dim=1)",
        dtype="bfloat16",
        layouts=list(layouts),
        transformers=transformers.__version__,
        liger_kernel=liger,
        ours_configs=list(ours),
        ratios="<peer>/ours = the peer's GPU time over ours (above 1: ours faster); best_peer: fastest correct peer",
    )
    summary = summarise(results, ours)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.json").write_text(json.dumps({"meta": meta, "summary": summary, "results": results}, indent=1))
    plot(results, args.out / f"{stem}.png", op.rsplit(".", 2)[-2] + "." + op.rsplit(".", 1)[-1])
    print(f"copy ceiling {ceiling / 1e9:.0f} GB/s on {meta['gpu']}; GPU us per call by graph replay (% of copy)")
    names = [*PEERS_PLOTTED, "ours"]
    print(f"{'shape':>28} " + " ".join(f"{n:>15}" for n in names) + "  best_peer/ours")
    for r in results:
        cells = []
        for name in names:
            key = r.get("ours_best") if name == "ours" else name
            row = r["impls"].get(key, {}) if key else {}
            cells.append(f"{row['graph_us']:7.1f} ({row['pct_of_copy']:3.0f}%)" if "graph_us" in row else "-")
        ratio = r.get("ratios", {}).get("best_peer/ours")
        label = f"{r['model']} S={r['seq']} {r['layout'][:5]}"
        print(f"{label:>28} " + " ".join(f"{c:>15}" for c in cells) + (f"  {ratio:.2f}" if ratio else "  -"))
    gm = summary["geomean_best_peer_over_ours"]
    print(f"geomean best_peer/ours over shapes: {gm:.3f}" if gm else "geomean: no shape timed")
    if summary["ours_not_bit_exact"]:
        print(f"ours not bit-exact with eager: {'; '.join(summary['ours_not_bit_exact'])}", file=sys.stderr)
        return 1
    print_copy_floor(results, lambda r: f"{r['model']} S={r['seq']} {r['layout'][:5]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
