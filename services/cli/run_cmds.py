"""Asking for runs and following them: `yantra optimize`, `yantra generate`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import time
import uuid

from services.cli.common import CliError, add_common, bounded, open_bus, run_id_arg, settings_of
from services.cli.output import sanitize
from services.core import events as ev
from services.core import limits, policies, run_end, served_text
from services.core.bus import Bus
from services.core.describe import describe
from services.core.pb import events_pb2 as pb
from services.core.server_client import ServerUnavailable, generate, wait_ready
from services.core.stack import resolve_server_addr
from services.profiler import served_plan

CANARY_PROMPT = "The quick brown fox"


# ------------------------------------------------------------------ optimize


async def request_run(
    bus: Bus,
    *,
    model: str,
    policy: pb.SwapPolicy,
    max_candidates: int,
    prompts: list[str],
    decode_tokens: int,
    max_targets: int = 0,
    author: str = "",
    served_streams: list[int] | None = None,
    only_targets: list[str] | None = None,
) -> str:
    run_id = time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
    msg = pb.RunRequested(
        model=model,
        policy=policy,
        max_candidates=max_candidates,
        prompts=prompts,
        decode_tokens=decode_tokens,
        requested_by="yantra-cli",
        max_targets=max_targets,
        author="" if author == "template" else author,  # the default stays unset: a template run's bytes as ever
        served_streams=served_streams or [],  # none: the profiler's levels for the device
        only_targets=only_targets or [],  # none: every target
    )
    env = ev.make_envelope(run_id, msg, producer="cli", time_ns=time.time_ns(), event_id=str(uuid.uuid4()))
    await bus.publish(env)
    return run_id


async def follow_run(bus: Bus, run_id: str, timeout: float, out=print) -> list[ev.Recorded]:
    """Print the run's events as they land until it ends (completed, failed or cancelled) or the timeout;
    returns the run's log."""
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
    policy.CopyFrom(policies.NAMED[name])
    return policy


def check_run_request(prompts: list[str], decode_tokens: int, max_positions: int) -> None:
    """Refuse what could never be measured before it is asked (the services refuse it too, ending the run)."""
    empty = [str(i + 1) for i, p in enumerate(prompts) if not p]
    if empty:
        raise CliError(f"--prompt {', '.join(empty)} is empty: give text to profile and measure with")
    if max_positions and decode_tokens >= max_positions:
        raise CliError(
            f"--decode-tokens {decode_tokens} does not fit the served model: prompt + decoded tokens must fit its "
            f"{max_positions} positions"
        )


async def start_run(bus: Bus, args, health) -> str:
    prompts = args.prompt or []  # none: the profiler's own defaults (services.profiler.domain)
    check_run_request(prompts, args.decode_tokens, health.max_positions)
    policy = _resolve_policy(args, health.device)
    run_id = await request_run(
        bus,
        model=health.model,
        policy=policy,
        max_candidates=args.max_candidates,
        prompts=prompts,
        decode_tokens=args.decode_tokens,
        max_targets=getattr(args, "max_targets", 0),
        author=getattr(args, "author", ""),
        served_streams=getattr(args, "served_streams", None),
        only_targets=getattr(args, "target", None),
    )
    print(f"run {run_id}: optimising {health.model} on {health.device} ({health.dtype}), policy {policy.name}")
    return run_id


async def cmd_optimize(args) -> int:
    check_run_options(args)
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
        done = ev.last(log, "RunCompleted")
        if done is None:  # failed or cancelled: the log says why
            print(f"run {run_id} {run_end.state(log)}")
            return 1
        m = done.msg
        if m.HasField("served"):  # schema 11: the served load at each level, and the run's verdict on it
            print(sanitize(f"run {run_id} {m.outcome}"))
            for line in served_text.run_lines(m):
                print(f"  {line}")
        else:
            print(f"run {run_id} {m.outcome}: {m.tokens_per_s_before:.1f} -> {m.tokens_per_s_after:.1f} tok/s")
        return 0
    finally:
        await bus.close()


async def cmd_cancel(args) -> int:
    bus = await open_bus(settings_of(args))
    try:
        log = await bus.read_run(args.run)
        request = ev.first(log, "RunRequested")
        if request is None:
            raise CliError(f"no run {args.run!r} in the log (see `yantra runs`)")
        end = run_end.ended(log)
        if end is not None:
            raise CliError(f"run {args.run} has already ended: {run_end.state(log)}")
        msg = pb.RunCancelled(reason=args.reason, requested_by="yantra-cli")
        env = ev.make_envelope(
            args.run,
            msg,
            producer="cli",
            time_ns=time.time_ns(),
            causation_id=request.env.event_id,
            event_id=str(uuid.uuid4()),
        )
        await bus.publish(env)
    finally:
        await bus.close()
    print(
        f"run {args.run} cancelled ({args.reason}); the services answer nothing more of it, and a profile or "
        "measure the server is running for it stops"
    )
    return 0


async def cmd_generate(args) -> int:
    addr = resolve_server_addr(settings_of(args))
    try:
        tps = 0.0
        async for chunk in generate(addr, args.prompt, args.max_new_tokens):
            # Model text is any bytes the tokenizer decodes to, control characters included (the tiny presets'
            # random weights emit them often): escaped, they cannot act on the terminal or on `less -R`.
            print(sanitize(chunk.text), end="", flush=True)
            if chunk.done:
                tps = chunk.tokens_per_s
        print(f"\n[{tps:.1f} tokens/s]")
    except ServerUnavailable as exc:
        raise CliError(f"{exc}; start it with `yantra up`") from exc
    except ValueError as exc:  # the server's refusal, which may quote the request
        raise CliError(sanitize(str(exc))) from exc
    return 0


def _new_tokens(text: str) -> int:
    """--max-new-tokens: a positive integer; the bound, which depends on the model and the prompt, is the server's."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 1 <= value < 1 << 32:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number of tokens")
    return value


def _prompt(text: str) -> str:
    """--prompt: at most MAX_PROMPT_CHARS characters (the profiler refuses longer, ending the run)."""
    if len(text) > limits.MAX_PROMPT_CHARS:
        raise argparse.ArgumentTypeError(
            f"a prompt of {len(text):,} characters is outside 1..{limits.MAX_PROMPT_CHARS:,}: a run profiles with "
            "short requests (limits.MAX_PROMPT_CHARS)"
        )
    return text


class _Prompts(argparse.Action):
    """--prompt, repeatable up to MAX_RUN_PROMPTS times: each is decoded a dozen times over while the model is held."""

    def __call__(self, parser, namespace, value, option_string=None):
        prompts = [*(getattr(namespace, self.dest, None) or []), value]
        if len(prompts) > limits.MAX_RUN_PROMPTS:
            raise argparse.ArgumentError(
                self,
                f"given more than {limits.MAX_RUN_PROMPTS} times: a run takes at most {limits.MAX_RUN_PROMPTS} "
                "prompts (limits.MAX_RUN_PROMPTS)",
            )
        setattr(namespace, self.dest, prompts)


def _seconds(text: str) -> float:
    """A positive, finite number of seconds (a zero or negative wait would end before anything could happen)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of seconds")
    return value


def check_run_options(args) -> None:
    """CliError when the run options ask beyond a run's limits together (services.core.limits), though each is in
    range alone: the tokens of a measuring pass are prompts x decode tokens. `optimize` and `demo` call it first,
    before anything is connected to or started. Without --prompt the profiler's four defaults take any
    --decode-tokens in range (tests/test_limits.py holds it to that)."""
    problem = limits.run_problem(len(args.prompt), args.decode_tokens) if args.prompt else ""
    problem = problem or served_plan.streams_problem(getattr(args, "served_streams", None) or [])
    problem = problem or limits.targets_problem(getattr(args, "target", None) or [])
    if problem:
        raise CliError(problem)


def add_run_options(sp: argparse.ArgumentParser) -> None:
    sp.add_argument(
        "--policy",
        choices=["auto", *policies.NAMED],
        default="auto",
        help="swap policy recorded in the run (auto: gpu-default; demo on CPU: cpu-untimed)",
    )
    sp.add_argument(
        "--min-reward",
        type=int,
        choices=[-1, 1, 2, 3],
        help="explicit swap threshold instead of --policy: the judge's reward a kernel needs to be swapped in",
    )
    sp.add_argument(
        "--max-candidates",
        type=bounded(1, limits.MAX_CANDIDATES),
        default=3,
        metavar="N",
        help=f"kernels to judge for each target before concluding it, 1..{limits.MAX_CANDIDATES} (default %(default)s)",
    )
    sp.add_argument(
        "--max-targets",
        type=bounded(0, limits.MAX_TARGETS),
        default=0,
        metavar="N",
        help=f"targets to work on, one after another in the profiler's ranked order, 0..{limits.MAX_TARGETS}; 0 "
        "(default): every target a template writes",
    )
    sp.add_argument(
        "--target",
        action="append",
        metavar="CLASS",
        help="work on this module class only (repeatable): its name as the profile shows it (Qwen2MLP, LayerNorm, "
        "apply_rotary_pos_emb) or its full path; the run ranks the named ones as it ranks every class and says so "
        "when none ran (default: every target)",
    )
    sp.add_argument(
        "--prompt",
        action=_Prompts,
        type=_prompt,
        metavar="TEXT",
        help=f"a prompt to profile and measure with (repeatable, at most {limits.MAX_RUN_PROMPTS} times, each at "
        f"most {limits.MAX_PROMPT_CHARS:,} characters; none: four short defaults)",
    )
    sp.add_argument(
        "--decode-tokens",
        type=bounded(1, limits.MAX_DECODE_TOKENS),
        default=16,
        metavar="N",
        help=f"tokens per prompt when measuring, 1..{limits.MAX_DECODE_TOKENS}, and at most "
        f"{limits.MAX_RUN_DECODE_TOKENS:,} over all prompts (default %(default)s)",
    )
    sp.add_argument(
        "--served-streams",
        type=bounded(1, served_plan.MAX_STREAMS),
        nargs="+",
        metavar="N",
        help="the served-load levels measured before and after the run, in concurrent streams over Generate, "
        f"at most {served_plan.MAX_LEVELS} (default: {' '.join(map(str, served_plan.GPU_STREAMS))} on a GPU, "
        f"{' '.join(map(str, served_plan.CPU_STREAMS))} on a CPU); a figure worse after beyond its 95%% interval "
        "rolls the run's swaps back",
    )
    sp.add_argument(
        "--timeout",
        type=_seconds,
        default=1800,
        metavar="SECONDS",
        help="seconds to wait for the run to complete (default %(default)s)",
    )


def register(sub) -> None:
    sp = sub.add_parser("optimize", help="request a run on the running stack and show its progress")
    add_common(sp)
    add_run_options(sp)
    sp.add_argument("--no-wait", action="store_true", help="print the run id and return")
    sp.add_argument(
        "--author",
        choices=["template", "gemini", "openai-compatible"],
        default="template",
        help="who writes the kernels: the templates' search (default), or an LLM asked through the coder's "
        "YANTRA_LLM_* settings, its answers recorded in the run (docs/authors.md)",
    )
    sp.add_argument(
        "--server-wait",
        type=_seconds,
        default=60,
        metavar="SECONDS",
        help="seconds to wait for the server to be ready (default %(default)s)",
    )
    sp.set_defaults(fn=cmd_optimize)

    sp = sub.add_parser("cancel", help="stop a run that is still running; recorded in its log (RunCancelled)")
    add_common(sp)
    sp.add_argument("run", type=run_id_arg, help="run id (see `yantra runs`)")
    sp.add_argument(
        "--reason", default="cancelled from the command line", metavar="TEXT", help="why, recorded in the run"
    )
    sp.set_defaults(fn=cmd_cancel)

    sp = sub.add_parser("generate", help="stream a completion from the live server")
    add_common(sp)
    sp.add_argument("prompt", help="the text to continue")
    sp.add_argument(
        "--max-new-tokens",
        type=_new_tokens,
        default=32,
        metavar="N",
        help="tokens to generate (default 32); prompt + new tokens must fit the model's maximum sequence length, "
        "which `yantra up` prints (512 for the tiny presets); past it the server names the bound for this prompt",
    )
    sp.set_defaults(fn=cmd_generate)
