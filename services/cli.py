"""`yantra`: start the stack, ask for runs, watch and replay them."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import time
import uuid
from pathlib import Path

from services.core import events as ev
from services.core.bus import Bus, BusUnavailable
from services.core.describe import describe
from services.core.logfile import write_log
from services.core.pb import events_pb2 as pb
from services.core.server_client import ServerUnavailable, generate, generate_tokens, list_swaps, wait_ready
from services.core.settings import Settings
from services.core.stack import NATS_LOG, Stack, StackError, resolve_nats_url, resolve_server_addr, start_stack
from services.core.swaplog import find_swap, read_swap_events, swap_history
from services.registry import SERVICES
from services.server.models import UnknownModel, check_model_name

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


class CliError(RuntimeError):
    """An error the user can act on: printed as one line, exit code 2."""


def _settings(args: argparse.Namespace) -> Settings:
    return Settings.from_env(
        data_dir=getattr(args, "data_dir", None),
        model=getattr(args, "model", None),
        device=getattr(args, "device", None),
    )


async def _bus(settings: Settings) -> Bus:
    try:
        return await Bus.connect(resolve_nats_url(settings), name="yantra-cli", timeout=3.0)
    except (StackError, BusUnavailable) as exc:
        raise CliError(f"{exc}. Start the stack with `yantra up` or set NATS_URL.") from exc


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


async def _start_run(bus: Bus, args, health) -> str:
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
    settings = _settings(args)
    bus = await _bus(settings)
    try:
        addr = resolve_server_addr(settings)
        try:
            health = await wait_ready(addr, timeout=args.server_wait)
        except ServerUnavailable as exc:
            raise CliError(str(exc)) from exc
        run_id = await _start_run(bus, args, health)
        if args.no_wait:
            return 0
        log = await follow_run(bus, run_id, args.timeout)
        done = ev.last(log, "RunCompleted").msg
        print(f"run {run_id} {done.outcome}: {done.tokens_per_s_before:.1f} -> {done.tokens_per_s_after:.1f} tok/s")
        return 0
    finally:
        await bus.close()


# ------------------------------------------------------------------ up / demo


def _supervise_once(stack: Stack, restart: bool) -> None:
    code = stack.nats_exit_code()
    if code is not None:
        log_file = stack.settings.data_dir / NATS_LOG
        if not restart:
            raise CliError(f"the embedded nats-server exited with {code} (see {log_file})")
        stack.restarts["nats-server"] = stack.restarts.get("nats-server", 0) + 1
        if stack.restarts["nats-server"] > 5:
            raise CliError(f"the embedded nats-server keeps exiting (last exit {code}; see {log_file})")
        print(f"nats-server exited with {code}; restarting it on {stack.nats_url} with its JetStream store kept")
        try:
            stack.restart_nats()
        except RuntimeError as exc:  # the port not free yet, say: the next round tries again
            print(f"nats-server did not start again ({exc}); retrying")
            return
    for name, code in stack.dead():
        if code == 2:
            raise CliError(f"service {name} stopped with a configuration error:\n{stack.log_tail(name)}")
        if not restart:
            raise CliError(f"service {name} exited with {code}:\n{stack.log_tail(name)}")
        stack.restarts[name] = stack.restarts.get(name, 0) + 1
        if stack.restarts[name] > 5:
            raise CliError(f"service {name} keeps crashing (exit {code}):\n{stack.log_tail(name)}")
        print(f"service {name} exited with {code}; restarting")
        stack.start_service(name)
        stack.record()


async def _bring_up(settings: Settings, stop: asyncio.Event | None = None) -> Stack:
    try:
        check_model_name(settings.model)
    except UnknownModel as exc:
        raise CliError(f"{exc}; set it with --model or YANTRA_MODEL") from exc
    try:
        stack = start_stack(settings, SERVICES)
    except (StackError, RuntimeError) as exc:
        raise CliError(str(exc)) from exc
    where = settings.nats_url or f"embedded nats-server at {stack.nats_url}"
    print(f"started {', '.join(SERVICES)} on {where}; logs in {stack.log_dir}")
    try:
        health = await wait_ready(
            settings.server_addr,
            timeout=600,
            still_starting=lambda: stack.procs["server"].poll() is None and not (stop and stop.is_set()),
        )
    except ServerUnavailable as exc:
        stack.stop()
        raise CliError(f"{exc}\n{stack.log_tail('server')}") from exc
    except BaseException:
        stack.stop()
        raise
    print(f"server ready on {settings.server_addr}: {health.model} on {health.device} ({health.dtype})")
    return stack


async def cmd_up(args) -> int:
    settings = _settings(args)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # SIGHUP too: a closed terminal stops the stack cleanly; SIGINT also where a background job ignores it.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)
    stack = await _bring_up(settings, stop)
    print("press Ctrl-C to stop; in another terminal: yantra optimize | yantra events --follow | yantra tui")
    try:
        while not stop.is_set():
            _supervise_once(stack, restart=True)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)
        return 0
    finally:
        print("stopping ...")
        stack.stop()
        print("stopped")


async def cmd_demo(args) -> int:
    # One loop from the stock model: swaps of earlier demos on this data dir are not re-applied
    # (the skill library still carries over, so a second demo starts warm).
    settings = _settings(args).model_copy(update={"restore_swaps": False})
    stack = await _bring_up(settings)
    try:
        addr = settings.server_addr
        before_ids, before_text, _ = await generate_tokens(addr, CANARY_PROMPT, 16)
        bus = await Bus.connect(stack.nats_url, name="yantra-demo")
        try:
            health = await wait_ready(addr, timeout=60)
            if args.policy == "auto" and args.min_reward is None:
                args.policy = "cpu-untimed" if health.device == "cpu" else "gpu-default"
                if health.device == "cpu":
                    print(
                        "policy: cpu-untimed (explicit, recorded in the run): without a GPU kernels cannot be timed,"
                        " so a correct (+1) kernel may swap"
                    )
            run_id = await _start_run(bus, args, health)

            async def watch():
                while True:
                    _supervise_once(stack, restart=False)
                    await asyncio.sleep(0.5)

            watcher = asyncio.create_task(watch())
            follow = asyncio.create_task(follow_run(bus, run_id, args.timeout))
            done, _ = await asyncio.wait([watcher, follow], return_when=asyncio.FIRST_COMPLETED)
            watcher.cancel()
            if follow not in done:
                follow.cancel()
                watcher.result()  # raises the supervisor's error
            log = follow.result()
        finally:
            await bus.close()
        after_ids, after_text, _ = await generate_tokens(addr, CANARY_PROMPT, 16)
        if args.report:
            _write_report(Path(args.report), run_id, log, before_ids, after_ids, health)
        if args.export:
            write_log(Path(args.export), log)
            print(f"event log exported to {args.export} (replay it with `yantra tui --replay {args.export}`)")
        return _summarise(run_id, log, before_ids, after_ids, settings.data_dir)
    finally:
        stack.stop()


def _write_report(path: Path, run_id: str, log: list[ev.Recorded], before: list[int], after: list[int], health) -> None:
    """The run's result as JSON, with its whole event log (for bench/results)."""
    import json

    from google.protobuf.json_format import MessageToDict

    done = ev.last(log, "RunCompleted").msg
    report = {
        "command": "yantra demo " + " ".join(sys.argv[2:]),
        "run_id": run_id,
        "model": health.model,
        "device": health.device,
        "dtype": health.dtype,
        "outcome": done.outcome,
        "reward": done.reward,
        "decode_tokens_per_s_before": done.tokens_per_s_before,
        "decode_tokens_per_s_after": done.tokens_per_s_after,
        "speedup": done.speedup,
        "greedy_tokens_equal": before == after,
        "events": [
            {"seq": r.seq, "type": r.type, "producer": r.env.producer, "payload": MessageToDict(r.msg)} for r in log
        ],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1))
    print(f"report written to {path}")


def _summarise(run_id: str, log: list[ev.Recorded], before: list[int], after: list[int], data_dir: Path) -> int:
    from services.core.replay import verify
    from services.registry import rederivers

    done = ev.last(log, "RunCompleted").msg
    types = [r.type for r in log]
    print()
    print(f"summary of run {run_id}")
    print(f"  events: {', '.join(dict.fromkeys(types))} ({len(types)} in all)")
    print(f"  outcome: {done.outcome}, target {done.target_class or '-'}, reward {done.reward:+d}")
    print(f"  decode: {done.tokens_per_s_before:.1f} -> {done.tokens_per_s_after:.1f} tok/s (x{done.speedup:.2f})")
    if "cpu-untimed" in {r.msg.policy.name for r in log if r.type == "RunRequested"}:
        print("  (on CPU the swapped kernel runs in the Triton interpreter, so it is slower: speed is a GPU claim)")
    print(f"  greedy tokens before == after the swap: {before == after} ({len(before)} tokens)")
    mismatches = verify(log, rederivers())
    verdict = "every event re-derived byte for byte" if not mismatches else f"{len(mismatches)} events differ"
    print(f"  replay --verify: {verdict}")
    for m in mismatches:
        print(f"    {m}")
    print(f"  the log stays in {data_dir}: `yantra up --data-dir {data_dir}` then `yantra replay {run_id} --verify`")
    return 0 if done.outcome == "swapped" and before == after and not mismatches else 1


# ------------------------------------------------------------------ reading


async def cmd_replay(args) -> int:
    from services.core.replay import verify
    from services.registry import rederivers

    settings = _settings(args)
    bus = await _bus(settings)
    try:
        log = await bus.read_run(args.run)
    finally:
        await bus.close()
    if not log:
        raise CliError(f"no run {args.run!r} in the log (see `yantra runs`)")
    for rec in log:
        print(describe(rec))
    if args.export:
        write_log(Path(args.export), log)
        print(f"exported {len(log)} events to {args.export}")
    if not args.verify:
        return 0
    mismatches = verify(log, rederivers())
    if mismatches:
        print(f"replay differs in {len(mismatches)} of {len(log)} events:")
        for m in mismatches:
            print(f"  {m}")
        return 1
    print(f"replay verified: all {len(log)} events re-derived byte for byte")
    return 0


async def cmd_runs(args) -> int:
    bus = await _bus(_settings(args))
    try:
        run_ids = await bus.run_ids()
        for run_id in run_ids:
            log = await bus.read_run(run_id)
            done = ev.last(log, "RunCompleted")
            state = done.msg.outcome if done else f"running ({log[-1].type})"
            print(f"{run_id}  {ev.first(log, 'RunRequested').msg.model:<22} {state}")
        if not run_ids:
            print("no runs yet: `yantra optimize` starts one")
    finally:
        await bus.close()
    return 0


async def cmd_events(args) -> int:
    bus = await _bus(_settings(args))
    subject = ev.run_filter(args.run or "*", args.type or ">")
    try:
        if not args.follow:
            for rec in await bus.read_all(subject):
                print(f"{rec.env.run_id}  {describe(rec)}", flush=True)
            return 0
        async with contextlib.aclosing(bus.tail(subject)) as events:
            async for rec in events:
                print(f"{rec.env.run_id}  {describe(rec)}", flush=True)
    finally:
        await bus.close()
    return 0


async def cmd_swaps(args) -> int:
    settings = _settings(args)
    bus = await _bus(settings)
    try:
        views = swap_history(*await read_swap_events(bus))
    finally:
        await bus.close()
    try:
        records = await list_swaps(resolve_server_addr(settings), settings.admin_token)
        served = {r.swap_id: r.state for r in records}
        server_note = ""
    except (ServerUnavailable, StackError) as exc:
        served, server_note = {}, f"(the server's own view is missing: {exc})"
    if not views:
        print("no swaps yet: a run swaps a kernel when one is judged good enough (`yantra optimize`)")
    for v in views:
        msg = v.committed.msg
        logged = "live" if v.rolled_back is None else f"rolled back: {v.rolled_back.msg.reason}"
        target = msg.target_class.rsplit(".", 1)[-1]
        print(
            f"{v.swap_id}  {target:<16} {msg.modules_patched:>3} modules  run {v.run_id}  log: {logged}"
            f"  server: {served.get(v.swap_id, '-')}"
        )
    if server_note:
        print(server_note)
    return 0


async def cmd_rollback(args) -> int:
    bus = await _bus(_settings(args))
    try:
        view = find_swap(swap_history(*await read_swap_events(bus)), args.swap)
        if view is None:
            raise CliError(f"no swap {args.swap!r} in the log (see `yantra swaps`)")
        if view.rolled_back is not None:
            ended = view.rolled_back.msg.reason
            raise CliError(f"swap {args.swap} is already rolled back (run {view.run_id}): {ended}")
        request = pb.RollbackRequested(swap_id=args.swap, reason=f"operator: {args.reason}")
        env = ev.make_envelope(
            view.run_id,
            request,
            producer="cli",
            time_ns=time.time_ns(),
            causation_id=view.committed.env.event_id,
            event_id=str(uuid.uuid4()),
        )
        await bus.publish(env)
        print(f"asked the server to roll back {args.swap} (run {view.run_id})")
        try:
            async with asyncio.timeout(args.timeout):
                async with contextlib.aclosing(bus.tail(ev.run_filter(view.run_id))) as events:
                    async for answer in events:
                        if answer.env.causation_id == env.event_id:
                            break
        except TimeoutError:
            raise CliError(
                f"no answer within {args.timeout:.0f}s: is the server up (`yantra up`)? The request stays in the log "
                "and is answered when it is back"
            ) from None
    finally:
        await bus.close()
    print("  " + describe(answer))
    restored = answer.type == "SwapRolledBack" and not answer.msg.observed.error
    return 0 if restored else 1


async def cmd_generate(args) -> int:
    addr = resolve_server_addr(_settings(args))
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


# ------------------------------------------------------------------ parser


def _run_id(text: str) -> str:
    try:
        return ev.check_run_id(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _bounded(low: int, high: int):
    """An argparse type: an integer in [low, high] (the server refuses others, which would stall a run)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is outside {low}..{high}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="yantra",
        description="Make a live model faster while it serves: profile, write a Triton kernel, judge, hot-swap.",
        epilog="NATS_URL selects a NATS server; unset, `up`/`demo` start an embedded one under --data-dir.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def common(sp, model=False):
        sp.add_argument("--data-dir", help="where the embedded stack keeps its state (default .yantra)")
        if model:
            sp.add_argument("--model", help="preset (tiny-qwen2, tiny-llama, qwen2.5-1.5b-shape), local path or hub id")
            sp.add_argument("--device", choices=["auto", "cpu", "cuda"], help="serving device (default auto)")

    def run_opts(sp):
        sp.add_argument(
            "--policy",
            choices=["auto", *POLICIES],
            default="auto",
            help="swap policy recorded in the run (auto: gpu-default; demo on CPU: cpu-untimed)",
        )
        sp.add_argument("--min-reward", type=int, choices=[-1, 1, 2, 3], help="explicit swap threshold instead")
        sp.add_argument("--max-candidates", type=_bounded(1, 32), default=3, help="kernels to judge before concluding")
        sp.add_argument("--prompt", action="append", help="a prompt to profile and measure with (repeatable)")
        sp.add_argument("--decode-tokens", type=_bounded(1, 4096), default=16, help="tokens per prompt when measuring")
        sp.add_argument("--timeout", type=float, default=1800, help="seconds to wait for the run to complete")

    sp = sub.add_parser("up", help="start nats-server and all five services; Ctrl-C stops them")
    common(sp, model=True)
    sp.set_defaults(fn=cmd_up)

    sp = sub.add_parser("demo", help="up + optimize + summary + shut down (the main job)")
    common(sp, model=True)
    run_opts(sp)
    sp.add_argument("--report", metavar="FILE", help="write the run's result and event log as JSON")
    sp.add_argument("--export", metavar="FILE", help="write the run's event log for `yantra tui --replay FILE`")
    sp.set_defaults(fn=cmd_demo)

    sp = sub.add_parser("optimize", help="request a run on the running stack and show its progress")
    common(sp)
    run_opts(sp)
    sp.add_argument("--no-wait", action="store_true", help="print the run id and return")
    sp.add_argument("--server-wait", type=float, default=60, help="seconds to wait for the server to be ready")
    sp.set_defaults(fn=cmd_optimize)

    sp = sub.add_parser("replay", help="print a run's log; --verify re-derives every event and compares bytes")
    common(sp)
    sp.add_argument("run", type=_run_id, help="run id (see `yantra runs`)")
    sp.add_argument("--verify", action="store_true", help="re-derive every decision and report any difference")
    sp.add_argument("--export", metavar="FILE", help="also write the log to FILE (JSON lines)")
    sp.set_defaults(fn=cmd_replay)

    sp = sub.add_parser("runs", help="list runs and their outcomes")
    common(sp)
    sp.set_defaults(fn=cmd_runs)

    sp = sub.add_parser("events", help="print events of all runs (or one); --follow keeps tailing")
    common(sp)
    sp.add_argument("--run", type=_run_id, help="only this run")
    sp.add_argument("--type", choices=ev.RUN_EVENT_NAMES, help="only this event type")
    sp.add_argument("--follow", "-f", action="store_true", help="keep printing new events")
    sp.set_defaults(fn=cmd_events)

    sp = sub.add_parser("swaps", help="every swap the log holds, live or rolled back, and the server's own view")
    common(sp)
    sp.set_defaults(fn=cmd_swaps)

    sp = sub.add_parser("rollback", help="take a swapped kernel out of the live server (recorded in its run)")
    common(sp)
    sp.add_argument("swap", help="swap id (see `yantra swaps`)")
    sp.add_argument("--reason", default="asked from the command line", help="why, recorded in the run")
    sp.add_argument("--timeout", type=float, default=60, help="seconds to wait for the server's answer")
    sp.set_defaults(fn=cmd_rollback)

    sp = sub.add_parser("generate", help="stream a completion from the live server")
    common(sp)
    sp.add_argument("prompt")
    sp.add_argument("--max-new-tokens", type=int, default=32)
    sp.set_defaults(fn=cmd_generate)

    sp = sub.add_parser("tui", help="watch runs live in a terminal UI, or replay one (--replay RUN|FILE)")
    common(sp)
    sp.add_argument("--replay", metavar="RUN|FILE", help="replay a run from the stream, or an exported log file")
    sp.set_defaults(fn=None)

    sp = sub.add_parser("serve", help="run one service in this process (what `up` starts for each)")
    sp.add_argument("name", choices=SERVICES)
    sp.set_defaults(fn=None)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    if args.command == "serve":
        import runpy

        sys.argv = [f"services.{args.name}"]
        try:
            runpy.run_module(f"services.{args.name}", run_name="__main__")
        except SystemExit as exc:
            return int(exc.code or 0)
        return 0
    if args.command == "tui":
        from tui.app import main as tui_main  # Textual starts its own event loop

        return tui_main(args.replay, _settings(args))
    try:
        return asyncio.run(args.fn(args))
    except CliError as exc:
        print(f"yantra {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
