"""Starting the stack: `yantra up` (supervised) and `yantra demo` (up + one run + summary)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from pathlib import Path

from services.cli.common import CliError, add_common, settings_of
from services.cli.run_cmds import CANARY_PROMPT, add_run_options, follow_run, start_run
from services.core import events as ev
from services.core.bus import Bus
from services.core.logfile import write_log
from services.core.server_client import ServerUnavailable, generate_tokens, wait_ready
from services.core.settings import Settings
from services.core.stack import NATS_LOG, Stack, StackError, start_stack
from services.registry import SERVICES
from services.server.models import UnknownModel, check_model_name

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
    settings = settings_of(args)
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
    settings = settings_of(args).model_copy(update={"restore_swaps": False})
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
            run_id = await start_run(bus, args, health)

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


def register(sub) -> None:
    sp = sub.add_parser("up", help="start nats-server and all five services; Ctrl-C stops them")
    add_common(sp, model=True)
    sp.set_defaults(fn=cmd_up)

    sp = sub.add_parser("demo", help="up + optimize + summary + shut down (the main job)")
    add_common(sp, model=True)
    add_run_options(sp)
    sp.add_argument("--report", metavar="FILE", help="write the run's result and event log as JSON")
    sp.add_argument("--export", metavar="FILE", help="write the run's event log for `yantra tui --replay FILE`")
    sp.set_defaults(fn=cmd_demo)
