"""What the server's vocabulary sweep (services/server/vocab_sweep.py) costs on a served model, per op family.

    python bench/vocab_sweep.py [--model qwen2.5-1.5b-shape] [--device cuda] [--prompt-tokens 256] [--out DIR]

For each family with a live target in the model: its template's first candidate (as the coder proposes it) through
the whole sweep, every token of the vocabulary (at drawn positions on a rotary model), then the recurring prompt (the
model's longest sequence, up to RECURRING), every candidate call under the live per-call limit; the wall time, the
calls checked and passed (an honest kernel passes them all), the longest vocabulary hold (one call of up to CHUNK
rows) and the recurring prompt's hold (one forward of it, timed alone: the longest a request waits behind the sweep)
beside a serving decode step's time on the same model. Writes bench/results/vocab_sweep_<model>_<device>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from services import ops  # noqa: E402
from services.core import kernels  # noqa: E402
from services.core.pb import events_pb2 as pb  # noqa: E402
from services.server import vocab_sweep  # noqa: E402
from services.server.call_watch import LiveClock  # noqa: E402
from services.server.engine import Engine  # noqa: E402
from services.server.models import load_model  # noqa: E402


def first_candidate(family: str, profile: pb.ModuleClassProfile) -> tuple[pb.Contract, str, pb.LaunchPlan]:
    template = ops.template(family)
    shape = tuple(int(d) for d in profile.input_shape)
    config = template.search_configs(template.variant_for(profile.computes), shape[-1], live_shape=shape)[0]
    return template.contract_for(profile.introspection, profile), template.render(config), template.plan(config)


def longest_hold(engine: Engine, contract: pb.Contract, call, tokens: list[int], sequence: bool = False) -> float:
    """One call of the sweep's largest size (or the recurring prompt: `sequence`), timed alone, warm (the hold a
    request may wait behind)."""
    tally = vocab_sweep.Tally()
    vocab_sweep.check_chunk(engine, contract, call, tokens, tally, None, sequence)  # warm
    if engine.cuda:
        torch.cuda.synchronize()
    started = time.perf_counter()
    vocab_sweep.check_chunk(engine, contract, call, tokens, tally, None, sequence)
    if engine.cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - started


async def measure(args) -> dict:
    engine = Engine(load_model(args.model, args.device))
    try:
        observed = await engine.capture_profile(["Hello there, how are you?"], 8)
        step_s = await engine.exclusive(lambda: _step_time(engine))
        vocab, rows = engine.loaded.vocab_size, vocab_sweep.CHUNK["cuda" if engine.cuda else "cpu"]
        families, seen = [], set()
        for profile in observed.modules:
            family = ops.family_of(profile.computes)
            if family is None or family in seen:
                continue
            seen.add(family)
            try:
                contract, source, plan = first_candidate(family, profile)
            except Exception as exc:  # a family with no template candidate for this target: said, not measured
                families.append({"family": family, "skipped": f"{type(exc).__name__}: {exc}"})
                continue
            call = kernels.bind(contract, kernels.candidate_wrapper(Path(tempfile.mkdtemp()), source, plan))
            found, clock = pb.ParityObservation(), LiveClock()
            await vocab_sweep.sweep(engine, contract, call, 0, found, clock)
            hold = await engine.exclusive(longest_hold, engine, contract, call, list(range(min(rows, vocab))))
            prompt = vocab_sweep.recurring_prompt(vocab, found.sweep_recurring_tokens, 2)
            recurring = await engine.exclusive(longest_hold, engine, contract, call, prompt, True)
            families.append({
                "family": family, "target": profile.introspection.class_path, "tokens": found.sweep_tokens,
                "calls_checked": found.sweep_calls_checked, "calls_passed": found.sweep_calls_passed,
                "wrong_tokens": list(found.sweep_wrong_tokens), "max_abs_err": found.sweep_max_abs_err,
                "sweep_s": round(found.sweep_s, 3), "longest_hold_s": round(hold, 4), "rows_per_call": rows,
                "max_position": found.sweep_max_position, "recurring_tokens": found.sweep_recurring_tokens,
                "recurring_hold_s": round(recurring, 4), "calls_timed": clock.timed, "calls_over_limit": clock.over,
            })  # fmt: skip
            print(json.dumps(families[-1]), flush=True)
    finally:
        engine.close()
    return {
        "command": "python " + " ".join(sys.argv),
        "model": args.model,
        "device": torch.cuda.get_device_name() if engine.cuda else "cpu",
        "dtype": engine.dtype,
        "vocab": vocab,
        "decode_step_s": round(step_s, 5),
        "families": families,
    }


def _step_time(engine: Engine) -> float:
    """A batch-1 decode's time per token on the eager lane (what one sweep hold is set beside)."""
    ids = engine.encode("Hello there")
    engine.decode(ids, 4)
    if engine.cuda:
        torch.cuda.synchronize()
    started = time.perf_counter()
    tokens, _ = engine.decode(ids, 16)
    if engine.cuda:
        torch.cuda.synchronize()
    return (time.perf_counter() - started) / max(1, len(tokens))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qwen2.5-1.5b-shape", help="a preset of services/server/models.py")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"), help="directory of the result file")
    args = parser.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)  # before the sweep, not after it: a long GPU run is not lost
    result = asyncio.run(measure(args))
    tag = "cpu" if result["device"] == "cpu" else result["device"].lower().replace(" ", "-")
    out = Path(args.out) / f"vocab_sweep_{args.model}_{tag}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
