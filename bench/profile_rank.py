"""The profiler's ranking of a model served here: `python bench/profile_rank.py --model qwen2.5-1.5b-shape`.

Loads the model as the server does (random weights from its config, no download), profiles real decode
requests on the device, and prints what the profiler ranks and which target it would choose, with the
server's per-child times of any layer an op family rewrites. Writes the ranking as JSON with --out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from google.protobuf import json_format  # noqa: E402

from services.profiler.domain import DEFAULT_PROMPTS, choose_target  # noqa: E402
from services.profiler.roofline import rank  # noqa: E402


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-qwen2", help="a preset or a local checkpoint directory")
    parser.add_argument("--device", default="auto", help="auto | cuda | cpu")
    parser.add_argument("--tokens", type=int, default=16, help="decode tokens per prompt")
    parser.add_argument("--out", type=Path, help="write the ranking here as JSON")
    args = parser.parse_args(argv)
    import torch

    from services.ops import gated_mlp, rotary, row_reduction
    from services.server.engine import Engine
    from services.server.models import load_model

    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    engine = Engine(load_model(args.model, device))
    observed = await engine.capture_profile(list(DEFAULT_PROMPTS), args.tokens)
    ranking = rank(observed)
    target, reason = choose_target(ranking, row_reduction.WRITABLE + gated_mlp.WRITABLE + rotary.WRITABLE)
    print(f"{args.model} on {device} ({observed.hardware.device_name}), {observed.decode_tokens_per_s:.1f} tok/s")
    for t in ranking[:8]:
        mark, name = "*" if t.supported else " ", t.class_path.rsplit(".", 1)[-1]
        print(f" {mark} {name:<28} {t.time_share:6.1%}  recoverable {t.recoverable_us:9,.0f} us"
              f"  floor {t.floor_us:8,.1f} us  {t.note}")  # fmt: skip
    for m in observed.modules:
        if m.roles:
            times = ", ".join(f"{k} {v:,.0f}" for k, v in sorted(m.child_time_us.items()))
            print(f"   {m.introspection.class_path.rsplit('.', 1)[-1]} ({m.computes}): {m.total_time_us:,.0f} us; "
                  f"inside its children (us): {times}")  # fmt: skip
    print(f"target: {target or '-'}: {reason}")
    if args.out:
        args.out.write_text(
            json.dumps(
                {
                    "model": args.model,
                    "device": observed.hardware.device_name or device,
                    "command": "python bench/profile_rank.py " + " ".join(argv or sys.argv[1:]),
                    "target": target,
                    "reason": reason,
                    "ranking": [json_format.MessageToDict(t, preserving_proto_field_name=True) for t in ranking],
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
