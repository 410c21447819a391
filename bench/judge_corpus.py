"""The adversarial corpus and the honest kernels through the real judge, on whatever device is here.

    python bench/judge_corpus.py --out bench/results            # every entry of the corpus's TABLE
    python bench/judge_corpus.py --only honest --part 1/2 --merge   # a part, merged into the same file
    python bench/judge_corpus.py --only dynamic --repeats 12        # each judged 12 times, 12 seeds

Every judging draws its cases from a fresh secret seed, as the live judge does: a hole the judge meets only
by chance shows as an entry refused in some judgings and not in others. `--repeats K` judges each entry K
times and writes judge_corpus_<device>_repeats.json: per entry, how many of the K went as expected and the
reasons of the others.

Writes bench/results/judge_corpus_<cpu|h200|gpu-name>.json: for every candidate (a file of
tests/adversarial, or a config of the shipped template) the layer and rule expected and got, the
reward and reason, the plan, the static findings, the correctness evidence (cases, regimes, worst
error against the honest bound, bias) and each timing row with its baselines. On a GPU the entries
run one at a time (timing must have the GPU to itself); on CPU several at once. The file is
rewritten after every entry, so a run cut short keeps what it judged. Needs torch, triton,
transformers, protobuf and hypothesis (no NATS, no pydantic).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "adversarial")]

import torch  # noqa: E402
from google.protobuf import json_format  # noqa: E402

GROUPS = {
    "static": lambda e: e.layer == "static",
    "contract": lambda e: e.layer == "contract",
    "dynamic": lambda e: e.layer in ("sandbox", "correctness"),
    "hostile": lambda e: e.layer != "passes",
    "honest": lambda e: e.layer == "passes",
    "all": lambda e: True,
}


def device_tag() -> tuple[str, str]:
    if not torch.cuda.is_available():
        return "cpu", "cpu"
    name = torch.cuda.get_device_name()
    tag = "h200" if "H200" in name else re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return "cuda", tag


def source_of(entry) -> str:
    """The entry's file, or the template config it renders ("template:warps=4,rows=1")."""
    if entry.file:
        return entry.file
    warps, rows = entry.template
    return f"template:warps={warps},rows={rows}"


def entry_result(entry, judged, wall_s: float, device: str = "cuda") -> dict:
    from services.judge.report import verdict_layer

    obs = judged.observed
    layer, rules = verdict_layer(obs)
    want_layer, want_rule = entry.expected(device)
    ok = layer == want_layer and (want_layer == "passes" and judged.reward >= 1 or want_rule in rules)
    if ok and want_layer == "static":  # the first finding, and the rules the trick itself trips
        ok = rules[0] == want_rule and set(entry.also) <= set(rules)
    as_dict = lambda m: json_format.MessageToDict(m, preserving_proto_field_name=True)  # noqa: E731
    return {
        "file": source_of(entry),
        "expected": {"layer": want_layer, "rule": want_rule, "also": list(entry.also)},
        "got": {"layer": layer, "rules": rules},
        "ok": ok,
        "reward": judged.reward,
        "reason": judged.reason,
        "speedup_vs_eager": judged.speedup_vs_eager,
        "speedup_vs_best": judged.speedup_vs_best,
        "plan": as_dict(entry.candidate()[1]),
        "static_findings": [f"{f.rule_id} (line {f.line}): {f.reason}" for f in obs.static_check.findings],
        "contract": as_dict(obs.contract) if obs.HasField("contract") else None,
        "sandbox": as_dict(obs.sandbox) if obs.HasField("sandbox") else None,
        "correctness": as_dict(obs.correctness) if obs.HasField("correctness") else None,
        "timing": as_dict(obs.timing) if obs.HasField("timing") else None,
        "fenced": fenced_summary(obs.fenced) if obs.HasField("fenced") else None,
        "judge_wall_s": round(wall_s, 2),
    }


def fenced_summary(fenced) -> dict:
    """A GPU judging's fenced pass (the cases again in the interpreter, every tensor fenced): how it ended, how long."""
    cor = fenced.correctness
    return {"wall_s": round(fenced.wall_s, 2), "exit": fenced.sandbox.exit, "rule": fenced.sandbox.rule_id,
            "checks": f"{cor.checks_passed}/{cor.checks_run}", "lowered": fenced.lowered}  # fmt: skip


def summary(results: dict) -> dict:
    hostile = [r for r in results.values() if r["expected"]["layer"] != "passes"]
    honest = [r for r in results.values() if r["expected"]["layer"] == "passes"]
    by_layer: dict[str, int] = {}
    for r in hostile:
        if r["ok"]:
            by_layer[r["got"]["layer"]] = by_layer.get(r["got"]["layer"], 0) + 1
    return {
        "hostile_rejected_by_the_right_layer": f"{sum(r['ok'] for r in hostile)}/{len(hostile)}",
        "hostile_rejected_per_layer": by_layer,
        # on this device: the honest kernels, and a hostile one harmless here (memory_overread_gpu_grid_only on a CPU)
        "honest_passed": f"{sum(r['ok'] for r in honest)}/{len(honest)}",
        "honest_rewards": {Path(r["file"]).stem: r["reward"] for r in honest},
        "failures": sorted(name for name, r in results.items() if not r["ok"]),
    }


def repeated(judgings: list[dict]) -> dict:
    """An entry judged several times: how many went as expected, and what the others got."""
    first = judgings[0]
    return {
        "file": first["file"],
        "expected": first["expected"],
        "ok": all(r["ok"] for r in judgings),
        "as_expected": f"{sum(r['ok'] for r in judgings)}/{len(judgings)}",
        "others": [{"got": r["got"], "reward": r["reward"], "reason": r["reason"]} for r in judgings if not r["ok"]],
        "judge_wall_s": [r["judge_wall_s"] for r in judgings],
    }


def repeats_summary(results: dict) -> dict:
    return {
        "as_expected_in_every_judging": f"{sum(r['ok'] for r in results.values())}/{len(results)}",
        "not_every_time": {name: r["as_expected"] for name, r in sorted(results.items()) if not r["ok"]},
    }


def write(path: Path, meta: dict, results: dict) -> None:
    judged = repeats_summary(results) if meta.get("repeats", 1) > 1 else summary(results)
    data = {**meta, "summary": judged, "results": dict(sorted(results.items()))}
    # a child's log may quote a path of this checkout (a warning's file): the file names it from the repository root
    path.write_text(json.dumps(data, indent=1).replace(f"{ROOT}/", "") + "\n")


async def run(args) -> int:
    import adversarial_corpus as corpus

    device, tag = device_tag()
    out = Path(args.out) / f"judge_corpus_{tag}{'_repeats' if args.repeats > 1 else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    results: dict = {}
    commands = [" ".join(sys.argv)]
    if args.merge and out.exists():
        previous = json.loads(out.read_text())
        results = previous.get("results", {})
        commands = previous.get("commands", [previous.get("command")]) + commands  # every run in the file
    chosen = [e for e in corpus.TABLE if GROUPS[args.only](e) and (not args.name or e.name in args.name)]
    part, parts = (int(n) for n in args.part.split("/"))
    chosen = chosen[part - 1 :: parts]  # --part 2/3: every third entry from the second (one GPU call each)
    meta = {
        "device": torch.cuda.get_device_name() if device == "cuda" else platform.processor() or "cpu",
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "triton": __import__("triton").__version__,
            "transformers": __import__("transformers").__version__,
        },
        "interpreted": device == "cpu",
        "walls_switched_off": os.environ.get("YANTRA_JUDGE_WALLS", ""),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "commands": [c for c in commands if c],
        "repeats": args.repeats,
    }
    jobs = 1 if device == "cuda" else max(1, args.jobs)
    limit = asyncio.Semaphore(jobs)
    scratch = Path(args.scratch) if args.scratch else None

    judgings: dict[str, list[dict]] = {}

    async def one(entry, k: int) -> None:
        async with limit:
            started = time.monotonic()
            try:
                judged, _ = await corpus.judge_entry(entry, device, scratch_dir=scratch)
            except Exception as exc:  # the bench reports a judge that failed, and goes on
                results[entry.name] = {"file": source_of(entry), "ok": False, "error": f"{type(exc).__name__}: {exc}",
                                       "expected": {"layer": entry.layer, "rule": entry.rule}}  # fmt: skip
                print(f"ERR {entry.name}: {type(exc).__name__}: {exc}", flush=True)
                return
            result = entry_result(entry, judged, time.monotonic() - started, device)
            judgings.setdefault(entry.name, []).append(result)
            results[entry.name] = result if args.repeats == 1 else repeated(judgings[entry.name])
            write(out, meta, results)
            mark = "ok " if result["ok"] else "BAD"
            got = f"{result['got']['layer']}/{','.join(result['got']['rules'])[:30]}"
            nth = f" {k + 1}/{args.repeats}" if args.repeats > 1 else ""
            print(f"{mark} {entry.name:36}{nth} {got:40} {judged.reward:+d} {result['judge_wall_s']:6.1f}s  "
                  f"{judged.reason[:110]}", flush=True)  # fmt: skip

    started = time.monotonic()
    await asyncio.gather(*(one(e, k) for k in range(args.repeats) for e in chosen))
    write(out, meta, results)
    if args.repeats > 1:
        s = repeats_summary(results)
        print(
            f"\n{len(chosen)} entries judged {args.repeats} times each in {time.monotonic() - started:.0f} s on "
            f"{meta['device']}: as expected in every judging {s['as_expected_in_every_judging']}; wrote {out}"
        )
        for name, share in s["not_every_time"].items():
            print(f"not every time: {name} as expected in {share}")
        return 0 if not s["not_every_time"] else 1
    s = summary(results)
    print(f"\n{len(chosen)} judged in {time.monotonic() - started:.0f} s on {meta['device']}: "
          f"hostile rejected by the right layer {s['hostile_rejected_by_the_right_layer']}, "
          f"expected to pass here and passed {s['honest_passed']}; wrote {out}")  # fmt: skip
    if s["failures"]:
        print(f"not as expected: {', '.join(s['failures'])}")
    return 0 if not s["failures"] else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    parser.add_argument("--only", choices=sorted(GROUPS), default="all")
    parser.add_argument("--name", nargs="*", default=[], help="only these entries (file stems)")
    parser.add_argument("--jobs", type=int, default=max(1, min(4, os.cpu_count() or 1)), help="CPU only")
    parser.add_argument("--part", default="1/1", help="K/N: judge every N-th entry from the K-th (split a long run)")
    parser.add_argument("--merge", action="store_true", help="keep the other entries of an existing result file")
    parser.add_argument("--scratch", default="", help="where sandbox scratch directories go (default: the temp dir)")
    parser.add_argument(
        "--repeats", type=int, default=1, help="judge each entry this many times, each a fresh seed (chance shows)"
    )
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    return asyncio.run(run(args))


if __name__ == "__main__":
    raise SystemExit(main())
