"""Transfer, measured: does a skill learned on one model seed the search on another?

Each scenario runs the real stack (an embedded nats-server and the five services as processes, Triton kernels in the
interpreter on a CPU) on a fresh data dir, with `services.core.stack.start_stack`, as `yantra up` does:

  cold        tiny-gpt2 on an empty skill index
  warm        tiny-qwen2 first (its judged recipes published as skills: RMSNorm, the decoder layer's residual norm,
              the gated MLP, RoPE), the stack stopped, then tiny-gpt2 on the same data dir (same stream, same index)
  wide-cold   a GPT-2 of another hidden width (--wide-width, default 768: GPT-2 small's) on an empty index
  wide-warm   the warm scenario's tiny-qwen2 data dir, copied once that run ended, then the wide GPT-2 on it

The wide GPT-2 is not a preset (every tiny preset is 64 wide): it is a local checkpoint this script writes into its
work dir (transformers' GPT2LMHeadModel, random weights seeded as the presets' are, norm weights perturbed as theirs,
and a byte-level tokenizer), served through `--model PATH` as any local checkpoint is.

Every figure is read from the runs' events, never from logs: SkillsRetrieved (what the index answered, distances,
UCB1 scores, the pick), CandidateProposed (origin, skill id, config, attempt), CandidateJudged (reward),
TargetConcluded. For each target of the GPT-2 run (the headline is the LayerNorm), "to_first_accepted" is the
attempt number of the first candidate, in the coder's search order, judged at or above the run's swap threshold
(the policy in TargetConcluded): the candidates a search spends before it holds a kernel it may swap.

CPU run (about 7 minutes on two busy cores):

  .venv/bin/python bench/transfer.py --out bench/results/transfer_cpu.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from services.core import events as ev  # noqa: E402
from services.core import policies  # noqa: E402
from services.core.bus import Bus  # noqa: E402
from services.core.nats_launcher import free_port  # noqa: E402
from services.core.pb import events_pb2 as pb  # noqa: E402
from services.core.server_client import wait_ready  # noqa: E402
from services.core.settings import Settings  # noqa: E402
from services.core.stack import start_stack  # noqa: E402
from services.registry import SERVICES  # noqa: E402

LAYERNORM = "torch.nn.modules.normalization.LayerNorm"
SOURCE_MODEL = "tiny-qwen2"
TARGET_MODEL = "tiny-gpt2"


def short(class_path: str) -> str:
    return class_path.rsplit(".", 1)[-1]


def config_dict(config: pb.TemplateConfig) -> dict:
    out = {"template": config.template, "num_warps": config.num_warps, "rows_per_program": config.rows_per_program}
    if config.variant:
        out["variant"] = config.variant
    if config.params:
        out["params"] = dict(sorted(config.params.items()))
    return out


# ---------------------------------------------------------------------- a wide GPT-2 as a local checkpoint


def write_wide_gpt2(directory: Path, width: int) -> dict:
    """A GPT-2 `width` wide, otherwise the tiny preset's sizes, saved as a local checkpoint with a byte-level
    tokenizer; returns its config as recorded in the result."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    from services.server import models as presets

    sizes = presets.tiny_sizes()
    heads = sizes["num_attention_heads"]
    config = GPT2Config(
        n_embd=width, n_layer=sizes["num_hidden_layers"], n_head=heads, vocab_size=sizes["vocab_size"],
        n_positions=sizes["max_position_embeddings"], bos_token_id=0, eos_token_id=0,
        initializer_range=sizes["initializer_range"],
    )  # fmt: skip
    torch.manual_seed(presets.SEED)
    model = GPT2LMHeadModel(config).eval()
    presets._perturb_norm_weights(model, presets.SEED + 1)  # a kernel that forgets the weight must not pass
    gen = torch.Generator().manual_seed(presets.SEED + 2)
    with torch.no_grad():  # and one that forgets LayerNorm's bias neither (it starts at exactly 0)
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.bias.copy_(0.1 * torch.randn(module.bias.shape, generator=gen))
    model.save_pretrained(directory)
    # Bytes as tokens 0..255 (the presets' ByteTokenizer's ids), no merges.
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=alphabet[0], bos_token=alphabet[0])
    fast.save_pretrained(directory)
    return {"architecture": "GPT2LMHeadModel", "n_embd": width, "n_layer": config.n_layer, "n_head": heads,
            "vocab_size": config.vocab_size, "n_positions": config.n_positions, "seed": presets.SEED}  # fmt: skip


# ---------------------------------------------------------------------- one run on one stack


async def one_run(data_dir: Path, model: str, args: argparse.Namespace, tag: str) -> list[ev.Recorded]:
    """Start the stack on `data_dir` serving `model`, request one run, wait for its RunCompleted (or RunFailed),
    stop the stack; the run's log."""
    settings = Settings(
        data_dir=data_dir, server_addr=f"127.0.0.1:{free_port()}", model=model, device=args.device, log_level="INFO"
    )
    stack = start_stack(settings, SERVICES)
    try:
        await wait_ready(settings.server_addr, timeout=300, still_starting=lambda: stack.procs["server"].poll() is None)
        bus = await Bus.connect(stack.nats_url, name="bench-transfer")
        try:
            run_id = f"transfer-{tag}-{os.urandom(3).hex()}"
            request = pb.RunRequested(
                model=model if not os.path.isabs(model) else "gpt2-wide (local checkpoint)",
                policy=policies.NAMED[args.policy],
                max_candidates=args.max_candidates,
                max_targets=0,  # every target: the LayerNorm's rank among them moves with CPU timings
                prompts=["Hello there"],
                decode_tokens=4,
                served_streams=[1],  # the smallest served measure before and after: not what is measured here
                requested_by="bench/transfer.py",
            )
            env = ev.make_envelope(run_id, request, producer="bench", time_ns=time.time_ns(), event_id=f"req-{run_id}")
            await bus.publish(env)
            deadline = time.monotonic() + args.run_timeout_s
            while True:
                log = await bus.read_run(run_id)
                if any(r.type in ("RunCompleted", "RunFailed") for r in log):
                    return log
                dead = stack.dead()
                if dead:
                    tails = "\n".join(stack.log_tail(n, 30) for n, _ in dead)
                    raise RuntimeError(f"services died: {dead}\n{tails}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"run {run_id} did not end in {args.run_timeout_s} s: {[r.type for r in log]}")
                await asyncio.sleep(1.0)
        finally:
            await bus.close()
    finally:
        stack.stop()


# ---------------------------------------------------------------------- figures from events


def target_figures(log: list[ev.Recorded], target: str, source: dict[str, str]) -> dict:
    """One target's search, from the run's events; `source`: the skills the source run published (id -> its target)."""
    found = next((r for r in log if r.type == "SkillsRetrieved" and r.msg.target_class == target), None)
    retrieved = found.msg if found is not None else None
    proposed = sorted(
        (r.msg for r in log if r.type == "CandidateProposed" and r.msg.target_class == target), key=lambda p: p.attempt
    )
    ids = {p.candidate_id for p in proposed}
    judged = {}
    for r in log:  # the first verdict of each candidate is its verdict
        if r.type == "CandidateJudged" and r.msg.candidate_id in ids and r.msg.candidate_id not in judged:
            judged[r.msg.candidate_id] = r.msg
    concluded = next((r.msg for r in log if r.type == "TargetConcluded" and r.msg.target_class == target), None)
    threshold = concluded.policy.min_reward if concluded is not None else policies.CPU_UNTIMED.min_reward
    candidates = []
    for p in proposed:
        j = judged.get(p.candidate_id)
        candidates.append({
            "attempt": p.attempt, "origin": p.origin, "skill_id": p.skill_id, "config": config_dict(p.config),
            "reward": j.reward if j is not None else None,
            "speedup_vs_eager": round(j.speedup_vs_eager, 3) if j is not None and j.speedup_vs_eager else None,
        })  # fmt: skip
    accepted = [c["attempt"] for c in candidates if c["reward"] is not None and c["reward"] >= threshold]
    out = {
        "target": target,
        "swap_threshold": threshold,
        "to_first_accepted": min(accepted) if accepted else None,
        "best_reward": max((c["reward"] for c in candidates if c["reward"] is not None), default=None),
        "candidates_judged": len(judged),
        # where the judge timed (a GPU): the attempt of the fastest accepted candidate (None on a CPU: untimed)
        "fastest_accepted": max(
            (c for c in candidates if c["attempt"] in accepted and c["speedup_vs_eager"]),
            key=lambda c: c["speedup_vs_eager"],
            default={},
        ).get("attempt"),
        "first_origin": candidates[0]["origin"] if candidates else None,
        "first_skill_id": candidates[0]["skill_id"] if candidates else None,
        "candidates": candidates,
        "concluded": None,
        "retrieved": None,
    }
    if concluded is not None:
        out["concluded"] = {"reward": concluded.reward, "swap": concluded.swap,
                            "candidates_judged": concluded.candidates_judged, "reason": concluded.reason}  # fmt: skip
    if retrieved is not None:
        chosen = retrieved.chosen_skill_id
        here = {r.msg.skill_id: _target_of(log, r.msg.candidate_id) for r in log
                if r.type == "SkillPublished" and r.seq < found.seq}  # fmt: skip
        where = [f"the {SOURCE_MODEL} run ({source[chosen]})"] if chosen in source else []
        where += [f"this run ({here[chosen]})"] if chosen in here else []
        provenance = (" and ".join(where) or "elsewhere") if chosen else None
        out["retrieved"] = {
            "library_size": retrieved.observed.library_size,
            "chosen_skill_id": chosen,
            "chosen_from": provenance,
            "chosen_config": config_dict(retrieved.config) if retrieved.chosen_skill_id else None,
            "reason": retrieved.reason,
            "neighbours": [
                {"skill_id": n.skill_id, "distance": round(n.distance, 6), "pulls": n.pulls,
                 "reward_sum": n.reward_sum, "config": config_dict(n.config),
                 "ucb1": (None if s == float("-inf") else ("inf" if s == float("inf") else round(s, 6)))}
                for n, s in zip(retrieved.observed.neighbours, retrieved.ucb_scores, strict=False)
            ],
        }  # fmt: skip
    return out


def run_figures(log: list[ev.Recorded], wall_s: float, source: dict[str, str] | None = None) -> dict:
    profile = ev.first(log, "ProfileCaptured")
    targets = list(profile.msg.targets) if profile is not None else []
    end = next((r for r in log if r.type in ("RunCompleted", "RunFailed")), None)
    return {
        "run_id": log[0].env.run_id if log else "",
        "wall_s": round(wall_s, 1),
        "end": end.type if end is not None else None,
        "outcome": end.msg.outcome if end is not None and end.type == "RunCompleted" else None,
        "targets_in_order": targets,
        "published": [
            {
                "skill_id": r.msg.skill_id,
                "op_family": r.msg.fingerprint.op_family,
                "config": config_dict(r.msg.config),
                "reward": r.msg.reward,
                "target": _target_of(log, r.msg.candidate_id),
            }
            for r in log
            if r.type == "SkillPublished"
        ],  # fmt: skip
        "per_target": {short(t): target_figures(log, t, source or {}) for t in targets},
    }


def _target_of(log: list[ev.Recorded], candidate_id: str) -> str:
    p = next((r.msg for r in log if r.type == "CandidateProposed" and r.msg.candidate_id == candidate_id), None)
    return short(p.target_class) if p is not None else ""


# ---------------------------------------------------------------------- the scenarios


async def timed_run(data_dir: Path, model: str, args, tag: str, source: dict[str, str] | None = None) -> dict:
    t0 = time.monotonic()
    log = await one_run(data_dir, model, args, tag)
    figures = run_figures(log, time.monotonic() - t0, source)
    print(f"  {tag}: {figures['end']} {figures['outcome'] or ''} in {figures['wall_s']} s, "
          f"targets {[short(t) for t in figures['targets_in_order']]}", flush=True)  # fmt: skip
    return figures


def published(figures: dict) -> dict[str, str]:
    return {p["skill_id"]: p["target"] for p in figures["published"]}


def gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU visible"


def write(result: dict, out: str, complete: bool) -> None:
    """The result so far (after each scenario, so a run cut short keeps what it measured)."""
    if out:
        result["complete"] = complete
        result["summary"] = summary(result)
        Path(out).write_text(json.dumps(result, indent=1) + "\n")


async def main_async(args: argparse.Namespace) -> dict:
    work = Path(tempfile.mkdtemp(prefix="yantra-transfer-"))
    wide_dir = work / f"gpt2-{args.wide_width}"
    policy = policies.NAMED[args.policy]
    result: dict = {
        "command": "python bench/transfer.py " + shlex.join(sys.argv[1:]),
        "device": args.device + (" (TRITON_INTERPRET=1)" if args.device == "cpu" else f" ({gpu_name()})"),
        "cpus": os.cpu_count(),
        "policy": {"name": policy.name, "min_reward": policy.min_reward},
        "max_candidates": args.max_candidates,
        "metric": (
            "to_first_accepted: the attempt number (the coder's search order) of the first candidate of a target "
            "judged at or above the run's swap threshold (the policy's min_reward); 1: the first kernel proposed was "
            "already one the run may swap. Every count is read from the run's events."
        ),
        "scenarios": {},
    }
    scenarios = args.scenarios
    try:
        if "cold" in scenarios:
            print("cold: tiny-gpt2 on an empty index", flush=True)
            result["scenarios"]["cold"] = {"gpt2": await timed_run(work / "cold", TARGET_MODEL, args, "cold")}
            write(result, args.out, complete=False)
        source = None
        if "warm" in scenarios or "wide-warm" in scenarios:
            print(f"warm: {SOURCE_MODEL} publishes, then {TARGET_MODEL} on the same data dir", flush=True)
            source = await timed_run(work / "warm", SOURCE_MODEL, args, "qwen2")
            shutil.copytree(work / "warm", work / "wide-warm")
            if "warm" in scenarios:
                target = await timed_run(work / "warm", TARGET_MODEL, args, "warm", published(source))
                result["scenarios"]["warm"] = {"qwen2": source, "gpt2": target}
                write(result, args.out, complete=False)
        if "wide-cold" in scenarios or "wide-warm" in scenarios:
            result["wide_model"] = write_wide_gpt2(wide_dir, args.wide_width)
        if "wide-cold" in scenarios:
            print(f"wide-cold: GPT-2 {args.wide_width} wide on an empty index", flush=True)
            figures = await timed_run(work / "wide-cold", str(wide_dir), args, "wide-cold")
            result["scenarios"]["wide-cold"] = {"gpt2": figures}
            write(result, args.out, complete=False)
        if "wide-warm" in scenarios:
            print(f"wide-warm: GPT-2 {args.wide_width} wide on a copy of the {SOURCE_MODEL} run's data dir", flush=True)
            figures = await timed_run(work / "wide-warm", str(wide_dir), args, "wide-warm", published(source))
            copied = "the warm scenario's run (its data dir copied)"
            result["scenarios"]["wide-warm"] = {"qwen2": copied, "gpt2": figures}
            write(result, args.out, complete=False)
    finally:
        if args.keep:
            print(f"work dir kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    write(result, args.out, complete=True)
    result["summary"] = summary(result)
    return result


def summary(result: dict) -> dict:
    """The LayerNorm's figures side by side, and what they show (worded from the figures, not assumed)."""
    rows = {}
    for name, sc in result["scenarios"].items():
        f = sc["gpt2"]["per_target"].get(short(LAYERNORM))
        if f is None:
            continue
        r = f["retrieved"] or {}
        rows[name] = {
            "to_first_accepted": f["to_first_accepted"], "best_reward": f["best_reward"],
            "first_speedup_vs_eager": f["candidates"][0]["speedup_vs_eager"] if f["candidates"] else None,
            "fastest_accepted": f["fastest_accepted"],
            "first_origin": f["first_origin"], "first_skill_id": f["first_skill_id"],
            "chosen_skill_id": r.get("chosen_skill_id"), "chosen_from": r.get("chosen_from"),
            "library_size": r.get("library_size"), "rank_in_run": sc["gpt2"]["targets_in_order"].index(LAYERNORM) + 1,
        }  # fmt: skip
    out: dict = {"LayerNorm": rows, "findings": []}
    for cold, warm in (("cold", "warm"), ("wide-cold", "wide-warm")):
        c, w = (rows.get(k, {}).get("to_first_accepted") for k in (cold, warm))
        if c is not None and w is not None:
            verdict = "fewer than" if w < c else ("as many as" if w == c else "more than")
            out["findings"].append(f"{warm}: the LayerNorm reached an accepted kernel at candidate {w}, {verdict} "
                                   f"{cold}'s {c}")  # fmt: skip
        # where the judge times (a GPU), also when the search found its fastest kernel: a cold start accepted at
        # candidate 1 can still need more candidates than a seeded one to reach the speed it ends with
        c, w = (rows.get(k, {}).get("fastest_accepted") for k in (cold, warm))
        if c is not None and w is not None:
            verdict = "sooner than" if w < c else ("as soon as" if w == c else "later than")
            out["findings"].append(f"{warm}: the LayerNorm's fastest accepted kernel was candidate {w}, {verdict} "
                                   f"{cold}'s ({c})")  # fmt: skip
    firsts = [f["candidates"][0] for sc in result["scenarios"].values() for f in sc["gpt2"]["per_target"].values()
              if f["candidates"]]  # fmt: skip
    if firsts and all(c["reward"] is not None and c["reward"] >= result["policy"]["min_reward"] for c in firsts):
        out["findings"].append(
            f"every target's first candidate, seeded or not, was judged at or above the policy's "
            f"{result['policy']['min_reward']:+d} (rewards {sorted({c['reward'] for c in firsts})}): a search that "
            "holds an accepted kernel at candidate 1 cold cannot take fewer warm"
        )
    for name, sc in result["scenarios"].items():
        for t, f in sc["gpt2"]["per_target"].items():
            r = f["retrieved"] or {}
            if r.get("chosen_skill_id") and f["first_origin"] != "skill" and f["candidates"]:
                theirs, ours = r["chosen_config"]["template"], f["candidates"][0]["config"]["template"]
                out["findings"].append(
                    f"{name}, {t}: the skill store chose {r['chosen_skill_id']} ({theirs}, from {r['chosen_from']}) "
                    f"but the first candidate is the {ours} table's first: the coder seeds only from a recipe of the "
                    "target's own template"
                )
            elif f["first_origin"] == "skill":
                out["findings"].append(f"{name}, {t}: seeded from {f['first_skill_id']} ({r.get('chosen_from')})")
    return out


def table(result: dict) -> str:
    lines = [f"{'scenario':<10} {'target':<18} {'first origin':<13} {'to 1st accepted':>15} {'best':>5} "
             f"{'judged':>6}  retrieved: chosen at distance, from"]  # fmt: skip
    for name, sc in result["scenarios"].items():
        for t, f in sc["gpt2"]["per_target"].items():
            r = f["retrieved"] or {}
            chosen = r.get("chosen_skill_id") or "-"
            dist = next((n["distance"] for n in r.get("neighbours", []) if n["skill_id"] == chosen), None)
            where = (f"{chosen} at {dist:.3f}, {r.get('chosen_from')}" if dist is not None
                     else f"none ({r.get('library_size', 0)} skills in the index)")  # fmt: skip
            lines.append(f"{name:<10} {t:<18} {f['first_origin'] or '-':<13} {str(f['to_first_accepted']):>15} "
                         f"{str(f['best_reward']):>5} {f['candidates_judged']:>6}  {where}")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="", help="result JSON (none: print only)")
    parser.add_argument("--max-candidates", type=int, default=2, help="candidates judged per target (default 2)")
    parser.add_argument("--wide-width", type=int, default=768, help="the other GPT-2's n_embd (default 768)")
    parser.add_argument("--scenarios", nargs="+", default=["cold", "warm", "wide-cold", "wide-warm"],
                        choices=["cold", "warm", "wide-cold", "wide-warm"])  # fmt: skip
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="serving and judging device")
    parser.add_argument("--policy", default="", choices=["", *policies.NAMED],
                        help="swap policy (default: cpu-untimed on cpu, gpu-default on cuda)")  # fmt: skip
    parser.add_argument("--run-timeout-s", type=float, default=1200)
    parser.add_argument("--keep", action="store_true", help="keep the work dir (data dirs, logs)")
    args = parser.parse_args()
    args.policy = args.policy or ("cpu-untimed" if args.device == "cpu" else "gpu-default")
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    result = asyncio.run(main_async(args))
    print(table(result))
    if args.out:
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
