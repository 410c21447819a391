"""Asking for runs and following them: `yantra optimize`, `yantra generate`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
import uuid

from services.cli.common import CliError, add_common, bounded, open_bus, settings_of
from services.core import events as ev
from services.core.bus import Bus
from services.core.describe import describe
from services.core.pb import events_pb2 as pb
from services.core.server_client import ServerUnavailable, generate, wait_ready
from services.core.stack import resolve_server_addr

POLICIES = {
    "gpu-default": pb.SwapPolicy(
        min_reward=2, name="gpu-default", reason="swap only kernels measured > 5% faster than eager"
    ),
    "cpu-untimed": pb.SwapPolicy(
        min_reward=1,
        name="cpu-untimed",
        reason=(
            "explicit: no GPU, kernels run under TRITON_INTERPRET=1 and cannot be timed; a correct (+1) kernel may swap"
        ),
    ),
}
DEFAULT_PROMPTS = ("The quick brown fox", "Once upon a time", "In a distant galaxy")
CANARY_PROMPT = "The quick brown fox"


# ------------------------------------------------------------------ optimize


async def request_run(
    bus: Bus, *, model: str, policy: pb.SwapPolicy, max_candidates: int, prompts: list[str], decode_tokens: int
) -> str:
    run_id = time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
    msg = pb.RunRequested(
        model=model,
        policy=policy,
        max_candidates=max_candidates,
        prompts=prompts,
        decode_tokens=decode_tokens,
        requested_by="yantra-cli",
    )
    env = ev.make_envelope(run_id, msg, producer="cli", time_ns=time.time_ns(), event_id=str(uuid.uuid4()))
    await bus.publish(env)
    return run_id


async def follow_run(bus: Bus, run_id: str, timeout: float, out=print) -> list[ev.Recorded]:
    """Print the run's events as they land until RunCompleted (or the timeout); returns the run's log."""
    try:
        async with asyncio.timeout(timeout):
            async with contextlib.aclosing(bus.tail(ev.run_filter(run_id))) as events:
                async for rec in events:
                    out("  " + describe(rec))
                    if rec.type in ev.TERMINAL_EVENTS:
                        break
    except TimeoutError:
        raise CliError(
            f"run {run_id} did not complete within {timeout:.0f}s; follow it with "
            f"`yantra events --run {run_id} --follow`"
        ) from None
    return await bus.read_run(run_id)  # the whole log, with anything that landed beside the last event


def _resolve_policy(args, device: str) -> pb.SwapPolicy:
    if args.min_reward is not None:
        reason = f"explicit --min-reward {args.min_reward}"
        return pb.SwapPolicy(min_reward=args.min_reward, name="explicit", reason=reason)
    name = args.policy
    if name == "auto":
        name = "gpu-default"
    if name == "gpu-default" and device == "cpu":
        print(
            "note: the server runs on CPU, where no kernel can be timed, so gpu-default (reward >= 2) will not swap;"
            " pass --policy cpu-untimed to allow a correct untimed kernel to swap"
        )
    policy = pb.SwapPolicy()
    policy.CopyFrom(POLICIES[name])
    return policy


async def start_run(bus: Bus, args, health) -> str:
    policy = _resolve_policy(args, health.device)
    run_id = await request_run(
        bus,
        model=health.model,
        policy=policy,
        max_candidates=args.max_candidates,
        prompts=args.prompt or list(DEFAULT_PROMPTS),
        decode_tokens=args.decode_tokens,
    )
    print(f"run {run_id}: optimising {health.model} on {health.device} ({health.dtype}), policy {policy.name}")
    return run_id


async def cmd_optimize(args) -> int:
    settings = settings_of(args)
    bus = await open_bus(settings)
    try:
        addr = resolve_server_addr(settings)
        try:
            health = await wait_ready(addr, timeout=args.server_wait)
        except ServerUnavailable as exc:
            raise CliError(str(exc)) from exc
        run_id = await start_run(bus, args, health)
        if args.no_wait:
            return 0
        log = await follow_run(bus, run_id, args.timeout)
        done = ev.last(log, "RunCompleted").msg
        print(f"run {run_id} {done.outcome}: {done.tokens_per_s_before:.1f} -> {done.tokens_per_s_after:.1f} tok/s")
        return 0
    finally:
        await bus.close()


async def cmd_generate(args) -> int:
    addr = resolve_server_addr(settings_of(args))
    try:
        tps = 0.0
        async for chunk in generate(addr, args.prompt, args.max_new_tokens):
            print(chunk.text, end="", flush=True)
            if chunk.done:
                tps = chunk.tokens_per_s
        print(f"\n[{tps:.1f} tokens/s]")
    except ServerUnavailable as exc:
        raise CliError(f"{exc}; start it with `yantra up`") from exc
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    return 0


def add_run_options(sp: argparse.ArgumentParser) -> None:
    sp.add_argument(
        "--policy",
        choices=["auto", *POLICIES],
        default="auto",
        help="swap policy recorded in the run (auto: gpu-default; demo on CPU: cpu-untimed)",
    )
    sp.add_argument("--min-reward", type=int, choices=[-1, 1, 2, 3], help="explicit swap threshold instead")
    sp.add_argument("--max-candidates", type=bounded(1, 32), default=3, help="kernels to judge before concluding")
    sp.add_argument("--prompt", action="append", help="a prompt to profile and measure with (repeatable)")
    sp.add_argument("--decode-tokens", type=bounded(1, 4096), default=16, help="tokens per prompt when measuring")
    sp.add_argument("--timeout", type=float, default=1800, help="seconds to wait for the run to complete")


def register(sub) -> None:
    sp = sub.add_parser("optimize", help="request a run on the running stack and show its progress")
    add_common(sp)
    add_run_options(sp)
    sp.add_argument("--no-wait", action="store_true", help="print the run id and return")
    sp.add_argument("--server-wait", type=float, default=60, help="seconds to wait for the server to be ready")
    sp.set_defaults(fn=cmd_optimize)

    sp = sub.add_parser("generate", help="stream a completion from the live server")
    add_common(sp)
    sp.add_argument("prompt")
    sp.add_argument("--max-new-tokens", type=int, default=32)
    sp.set_defaults(fn=cmd_generate)
