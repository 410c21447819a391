"""Starting the stack: `yantra up` (supervised) and `yantra demo` (up + one run + summary).

Over 400 lines, one file: `up` and `demo` share the supervisor (start, restart per window, stop on a signal) and its
one-line errors; `demo` is `up` plus one run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import nats
from nats.errors import NoRespondersError

from services.cli.common import CliError, add_common, add_nats_port, bounded, settings_of
from services.cli.run_cmds import CANARY_PROMPT, add_run_options, check_run_options, follow_run, start_run
from services.core import events as ev
from services.core import run_end, served_text
from services.core.bus import Bus, connect_plain
from services.core.bus_limits import BusLimits, limit_problems
from services.core.describe import decode_ratio, outside_noise
from services.core.launches import MAX_JUDGES
from services.core.logfile import write_log
from services.core.restart_budget import RestartBudget
from services.core.server_client import ServerUnavailable, WrongServer, generate_tokens, wait_ready
from services.core.settings import Settings, redact_url
from services.core.stack import NATS_LOG, Stack, StackError, start_stack
from services.core.stack_secure import LOOPBACK
from services.registry import SERVICES
from services.server.models import UnknownModel, check_model_name

# ------------------------------------------------------------------ up / demo


def _restart_budget() -> RestartBudget:
    try:
        return RestartBudget.from_env()
    except ValueError as exc:
        raise CliError(str(exc)) from exc


def _budget_spent(budget: RestartBudget, in_window: int, more: str = "") -> str:
    """Why the supervisor stops restarting: the budget it has spent, and what sets it (then `more`)."""
    return (
        f"after {in_window} restarts within {budget.window_s:g} s, the most allowed ({budget.describe()}; "
        f"YANTRA_RESTART_LIMIT, YANTRA_RESTART_WINDOW_S set it{more})"
    )


def _gave_up(what: str, budget: RestartBudget, in_window: int, code: int) -> str:
    return f"{what} keeps exiting: exit {code} {_budget_spent(budget, in_window)}"


def _restart_nats(stack: Stack) -> bool:
    """Start the embedded nats-server again (same port, store, credential) and record it; False, said, when it
    does not start (its port not free yet, say): a later round tries again."""
    try:
        stack.restart_nats()
    except RuntimeError as exc:
        print(f"nats-server did not start again ({exc}); retrying")
        return False
    _record(stack)
    return True


def _supervise_once(stack: Stack, budget: RestartBudget | None, now: float | None = None) -> None:
    """One round of the supervisor (`yantra up` polls every 0.5 s): restart what exited, within `budget`.

    A restart waiting for its backoff is deferred to a later round, not dropped. Without a budget
    (`yantra demo`), any exit is an error.
    """
    now = time.monotonic() if now is None else now
    code = stack.nats_exit_code()
    if code is not None:
        log_file = stack.settings.data_dir / NATS_LOG
        if budget is None:
            raise CliError(f"the embedded nats-server exited with {code} (see {log_file})")
        decision = budget.on_dead("nats-server", now)
        if decision.action == "give_up":
            raise CliError(
                f"{_gave_up('the embedded nats-server', budget, decision.restarts_in_window, code)} (see {log_file})"
            )
        if decision.first:
            when = "" if decision.action == "restart" else f" in {decision.due - now:.1f} s"
            print(f"nats-server exited with {code}; restarting it{when} on {stack.nats_url} with its store kept")
        if decision.action == "restart":
            budget.restarted("nats-server", now)
            _restart_nats(stack)
    _supervise_nodes(stack, budget, now)
    for name, code in stack.dead():
        if code == 2:
            raise CliError(f"service {name} stopped with a configuration error:\n{stack.log_tail(name)}")
        if budget is None:
            raise CliError(f"service {name} exited with {code}:\n{stack.log_tail(name)}")
        decision = budget.on_dead(name, now)
        if decision.action == "give_up":
            raise CliError(
                f"{_gave_up(f'service {name}', budget, decision.restarts_in_window, code)}; its log ends:\n"
                f"{stack.log_tail(name)}"
            )
        if decision.first:
            when = "" if decision.action == "restart" else f" in {decision.due - now:.1f} s"
            print(f"service {name} exited with {code}; restarting it{when}")
        if decision.action == "restart":
            budget.restarted(name, now)
            try:
                stack.start_service(name)
            except StackError as exc:  # its log cannot be opened: nothing it could do would be seen
                raise CliError(f"service {name} cannot be started again: {exc}") from exc
            _record(stack)


def _supervise_nodes(stack: Stack, budget: RestartBudget | None, now: float) -> None:
    """`yantra up --cluster N`: a node that exited is started again (its config, store and port), within `budget`;
    the others serve meanwhile, and every client rides out the election its loss caused."""
    if stack.cluster is None:
        return
    for index, code in stack.cluster.dead():
        name = f"nats-server-{index + 1}"
        log_file = stack.cluster.log_files[index]
        if budget is None:
            raise CliError(f"{name} of the cluster exited with {code} (see {log_file})")
        decision = budget.on_dead(name, now)
        if decision.action == "give_up":
            raise CliError(f"{_gave_up(name + ' of the cluster', budget, decision.restarts_in_window, code)} "
                           f"(see {log_file})")  # fmt: skip
        if decision.first:
            when = "" if decision.action == "restart" else f" in {decision.due - now:.1f} s"
            print(f"{name} of the cluster exited with {code}; restarting it{when} with its store kept")
        if decision.action == "restart":
            budget.restarted(name, now)
            try:
                stack.cluster.restart(index)
            except (RuntimeError, OSError) as exc:  # its port not free yet, say: a later round tries again
                print(f"{name} did not start again ({exc}); retrying")
                continue
            _record(stack)


def _record(stack: Stack) -> None:
    """stack.json updated with the new pids; when the disk will not take it, say so and run on (the stack
    serves all the same; only the pids other commands read are stale)."""
    try:
        stack.record()
    except StackError as exc:
        print(f"warning: {exc}")


# ------------------------------------------------------------------ JetStream on the embedded server
# A store that cannot be written (a full disk) breaks JetStream until nats-server is restarted, even after space
# is freed, in one of two ways: past its own storage limit it turns JetStream off and serves plain NATS on
# (nothing answers JetStream's API); on a disk that fills under it, the stream whose write failed keeps a
# "critical write error" (every publish to it times out) while JetStream still answers its account info.
# `yantra up` asks JetStream for its account info every JS_PROBE_EVERY_S and reads what nats-server logged
# since; it restarts the embedded nats-server (same port, same store) once a probe has failed twice in a row,
# or a write failure was logged, and the store's disk has room again.
JS_PROBE_EVERY_S = 5.0
JS_PROBE_TIMEOUT_S = 2.0
JS_FAILED_PROBES = 2  # one timeout may be a busy moment; two in a row, JS_PROBE_EVERY_S apart, is not
# Room the store's disk must have before a restart is worth it: the least a stream reserves
# (streams.MIN_RESERVED_BYTES); on a disk still full, JetStream would turn itself off at the first write.
JS_MIN_FREE_BYTES = 64 << 20


def jetstream_action(failed_probes: int, free_bytes: int) -> str:
    """What the supervisor does about JetStream after `failed_probes` failed probes in a row, with `free_bytes`
    free on the disk of the store: "ok" (it answers), "recheck" (one failure: ask again before acting),
    "wait_for_space" (off, and restarting now would turn it off again), or "restart"."""
    if failed_probes == 0:
        return "ok"
    if failed_probes < JS_FAILED_PROBES:
        return "recheck"
    if free_bytes < JS_MIN_FREE_BYTES:
        return "wait_for_space"
    return "restart"


# What nats-server logs when a write to its store failed (its disk full): then its store takes nothing more
STORE_WRITE_FAILED = ("critical write error", "will be disabled", "no space left on device")
_NATS_LOG_LINE = re.compile(r"^\[\d+\] \S+ \S+ \[[A-Z]+\] (.*)$")  # [pid] date time [LVL] what
JS_LOG_READ_MAX = 4 << 20  # the most of the log read in one probe (its tail): a flood of lines is not parsed whole


def store_write_failure(log_text: str) -> str:
    """The first line of nats-server's log text that says a write to its store failed, without its pid, time and
    level; "" when none does."""
    for line in log_text.splitlines():
        if any(words in line.lower() for words in STORE_WRITE_FAILED):
            said = _NATS_LOG_LINE.match(line)
            return (said.group(1) if said else line).strip()
    return ""


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.0f} MiB"


@dataclass
class JetStreamWatch:
    """The supervisor's watch on the embedded nats-server's JetStream (see jetstream_action)."""

    stack: Stack
    nc: nats.NATS | None = None
    failed: int = 0
    why: str = ""
    next_probe: float = 0.0
    said_waiting: bool = False
    log_offset: int = -1  # how much of nats-server's log was read (-1: none yet; what was there is history)
    write_failure: str = ""  # what nats-server logged when a write to its store failed, since it last started
    nats_pid: int = 0  # the nats-server that write_failure is about

    def __post_init__(self) -> None:
        self.skip_log()

    def skip_log(self) -> None:
        """What nats-server logged until now is not read: it was before it (re)started."""
        self.write_failure, self.nats_pid = "", self.stack.nats.process.pid if self.stack.nats else 0
        try:
            self.log_offset = (self.stack.settings.data_dir / NATS_LOG).stat().st_size
        except OSError:
            self.log_offset = 0

    def read_log(self) -> None:
        """Read what nats-server logged since the last read; remember a write failure in it."""
        if self.stack.nats is not None and self.stack.nats.process.pid != self.nats_pid:
            self.skip_log()  # restarted since (it had died): the failure was the old one's
        try:
            with open(self.stack.settings.data_dir / NATS_LOG, "rb") as log_file:
                end = log_file.seek(0, 2)
                if end < self.log_offset:  # a new log file
                    self.log_offset = 0
                log_file.seek(max(self.log_offset, end - JS_LOG_READ_MAX))
                text = log_file.read(end - log_file.tell()).decode(errors="replace")
        except OSError:
            return
        self.log_offset = end
        self.write_failure = self.write_failure or store_write_failure(text)

    async def probe(self) -> str | None:
        """None when JetStream answers and nats-server logged no failed write to its store since it started;
        "" when nothing can be said (nats-server down or not reached yet: the exit path restarts it); else why
        JetStream is unavailable."""
        self.read_log()
        if self.nc is None:
            try:  # it rides out restarts of the server (the exit path's, and this watch's own)
                self.nc = await connect_plain(
                    self.stack.nats_url,
                    "yantra-up",
                    JS_PROBE_TIMEOUT_S,
                    auth=self.stack.client_auth,
                    reconnect=True,
                    tls=self.stack.client_tls,
                )
            except Exception:
                return ""
        if not self.nc.is_connected:
            return ""
        try:
            reply = await self.nc.request("$JS.API.INFO", b"", timeout=JS_PROBE_TIMEOUT_S)
        except NoRespondersError:
            return "no JetStream answers"
        except TimeoutError:
            return f"JetStream did not answer within {JS_PROBE_TIMEOUT_S:g} s"
        except Exception:  # the connection went meanwhile
            return ""
        try:
            error = json.loads(reply.data).get("error")
        except (ValueError, AttributeError):
            return "JetStream answered something that is not its account info"
        if error:
            return str(error.get("description") or error)
        return f"a write to its store failed: {self.write_failure}" if self.write_failure else None

    async def check(self, budget: RestartBudget, now: float | None = None) -> None:
        """One round, when a probe is due: probe, decide (jetstream_action), say what it does and do it."""
        now = time.monotonic() if now is None else now
        stack = self.stack
        if stack.nats is None or now < self.next_probe or stack.nats_exit_code() is not None:
            return
        self.next_probe = now + JS_PROBE_EVERY_S
        why = await self.probe()
        if why == "":
            return
        if why is None:
            if self.said_waiting:
                print("JetStream answers again on the embedded nats-server")
            self.failed, self.said_waiting = 0, False
            return
        self.failed, self.why = self.failed + 1, why
        store = stack.nats.store_dir
        try:
            free = shutil.disk_usage(store).free
        except OSError:
            free = 0
        action = jetstream_action(self.failed, free)
        if action == "wait_for_space" and not self.said_waiting:
            self.said_waiting = True
            print(
                f"JetStream is unavailable on the embedded nats-server ({why}); its store's disk ({store}) has "
                f"{_mib(free)} free: it is restarted once {_mib(JS_MIN_FREE_BYTES)} are"
            )
        if action != "restart":
            return
        decision = budget.on_dead("nats-server", now)
        if decision.action == "give_up":
            log_file = stack.settings.data_dir / NATS_LOG
            raise CliError(
                f"JetStream stays unavailable on the embedded nats-server ({why}) "
                f"{_budget_spent(budget, decision.restarts_in_window, f'; see {log_file}')}"
            )
        if decision.action != "restart":
            return  # its backoff: a later round
        print(
            f"JetStream is unavailable on the embedded nats-server ({why}) and its store's disk has {_mib(free)} "
            f"free: restarting nats-server on {stack.nats_url} with its store kept"
        )
        budget.restarted("nats-server", now)
        if not _restart_nats(stack):
            return  # the exit path (nats-server not running) tries again
        self.failed, self.said_waiting = 0, False
        self.skip_log()
        self.next_probe = now + JS_PROBE_EVERY_S

    async def close(self) -> None:
        if self.nc is not None:
            with contextlib.suppress(Exception):
                await self.nc.close()


JUDGES_VAR = "YANTRA_JUDGES"  # how many judges `yantra up` and `yantra demo` start when --judges is not given
SECURE_VAR = "YANTRA_SECURE"  # `--secure` when set to 1 (accounts, a user per service, TLS)
NATS_HOST_VAR = "YANTRA_NATS_HOST"  # `--nats-host`: where the embedded nats-server listens


def judges_of(given: int | None, env: dict[str, str] | None = None) -> int:
    """The number of judges: --judges, else YANTRA_JUDGES, else 1; CliError, in one line, for a bad YANTRA_JUDGES."""
    if given is not None:
        return given
    text = (os.environ if env is None else env).get(JUDGES_VAR, "").strip()
    if not text:
        return 1
    try:
        return bounded(1, MAX_JUDGES)(text)
    except argparse.ArgumentTypeError as exc:
        raise CliError(f"{JUDGES_VAR}={text!r}: {exc} (the number of judges, 1 to {MAX_JUDGES})") from None


def secure_of(given: bool, env: dict[str, str] | None = None) -> bool:
    """--secure, else YANTRA_SECURE (1/0, true/false, yes/no, on/off); CliError, in one line, for another word."""
    if given:
        return True
    text = (os.environ if env is None else env).get(SECURE_VAR, "").strip().lower()
    if text in ("", "0", "false", "no", "off"):
        return False
    if text in ("1", "true", "yes", "on"):
        return True
    raise CliError(f"{SECURE_VAR}={text!r}: 1 (accounts, a user per service and TLS on the embedded NATS) or 0")


def nats_host_of(given: str | None, env: dict[str, str] | None = None) -> str:
    """--nats-host, else YANTRA_NATS_HOST, else loopback (start_stack checks it)."""
    return given or (os.environ if env is None else env).get(NATS_HOST_VAR, "").strip() or LOOPBACK


async def _bring_up(
    settings: Settings,
    stop: asyncio.Event | None = None,
    cluster: int = 0,
    judges: int = 1,
    *,
    secure: bool = False,
    nats_host: str = LOOPBACK,
) -> Stack:
    try:
        check_model_name(settings.model)
    except UnknownModel as exc:
        raise CliError(f"{exc}; set it with --model or YANTRA_MODEL") from exc
    # what every service would refuse at its start, said once before any starts
    problems = limit_problems(BusLimits.from_env(settings, os.environ))
    if problems:
        raise CliError(f"the bus's limits do not agree: {'; '.join(problems)}")
    try:
        stack = start_stack(settings, SERVICES, cluster, judges, secure=secure, nats_host=nats_host)
    except (StackError, RuntimeError) as exc:
        raise CliError(str(exc)) from exc
    except OSError as exc:  # one start_stack did not name: a full or read-only disk, say
        where = f" ({exc.filename})" if exc.filename else ""
        raise CliError(f"cannot start the stack: {exc.strerror or exc}{where}") from exc
    for notice in stack.notices:
        print(notice)
    print(f"started {', '.join(stack.procs)} on {_where(stack)}; logs in {stack.log_dir}")
    try:  # only our own server counts: its Health answers with the instance id start_stack gave it
        health = await wait_ready(
            settings.server_addr,
            timeout=600,
            still_starting=lambda: stack.procs["server"].poll() is None and not (stop and stop.is_set()),
            instance_id=stack.settings.instance_id,
        )
    except WrongServer as exc:
        stack.stop()
        raise CliError(str(exc)) from exc
    except ServerUnavailable as exc:
        stack.stop()
        raise CliError(f"{exc}\n{stack.log_tail('server')}") from exc
    except BaseException:
        stack.stop()
        raise
    print(
        f"server ready on {settings.server_addr}: {health.model} on {health.device} ({health.dtype}), "
        f"prompt + new tokens up to {health.max_positions}"
    )
    return stack


def _where(stack: Stack) -> str:
    """Where the stack's NATS is, and what a client needs there (never a secret)."""
    if stack.settings.nats_url:
        return redact_url(stack.settings.nats_url)  # a URL may carry a password
    cluster, nats = stack.cluster, stack.nats
    what = f"a nats-server cluster of {len(cluster.nodes)} nodes" if cluster else "embedded nats-server"
    if stack.security is None:
        guarded = (cluster and cluster.auth) or (nats and nats.auth)
        return f"{what} at {stack.nats_url}" + (", clients need YANTRA_ADMIN_TOKEN" if guarded else "")
    host = nats.host if nats else cluster.plans[0].host if cluster else LOOPBACK
    listens = "" if host == LOOPBACK else f", listening on {host}"
    return (
        f"{what} at {stack.nats_url}{listens}, a user per service and TLS (commands on this data dir find the CA"
        f" and their user in it; elsewhere NATS_CA={stack.security.files.ca})"
    )


def _stack_options(args) -> dict:
    """--judges, --secure and --nats-host, each else its variable; CliError, in one line, for a bad one, before
    anything starts."""
    return {
        "judges": judges_of(args.judges),
        "secure": secure_of(args.secure),
        "nats_host": nats_host_of(args.nats_host),
    }


async def cmd_up(args) -> int:
    settings = settings_of(args, client=False)
    budget = _restart_budget()  # a bad YANTRA_RESTART_* fails before anything starts
    options = _stack_options(args)  # and so does a bad YANTRA_JUDGES or YANTRA_SECURE
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # SIGHUP too: a closed terminal stops the stack cleanly; SIGINT also where a background job ignores it.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)
    stack = await _bring_up(settings, stop, args.cluster or 0, **options)
    started = time.monotonic()
    nodes = [f"nats-server-{i + 1}" for i in range(len(stack.cluster.nodes))] if stack.cluster else []
    for name in (*stack.procs, "nats-server", *nodes):
        budget.started(name, started)
    print("press Ctrl-C to stop; in another terminal: yantra optimize | yantra events --follow | yantra tui")
    watch = JetStreamWatch(stack)
    try:
        while not stop.is_set():
            _supervise_once(stack, budget)
            await watch.check(budget)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)
        return 0
    finally:
        print("stopping ...")
        await watch.close()
        stack.stop()
        print("stopped")


async def cmd_demo(args) -> int:
    # One loop from the stock model: swaps of earlier demos on this data dir are not re-applied
    # (the skill library still carries over, so a second demo starts warm).
    check_run_options(args)  # before the stack is brought up for a run it would refuse
    settings = settings_of(args, client=False).model_copy(update={"restore_swaps": False})
    stack = await _bring_up(settings, **_stack_options(args))
    try:
        addr = settings.server_addr
        before_ids, before_text, _ = await generate_tokens(addr, CANARY_PROMPT, 16)
        bus = await Bus.connect(stack.nats_url, name="yantra-demo", auth=stack.client_auth, tls=stack.client_tls)
        try:
            health = await wait_ready(addr, timeout=60, instance_id=stack.settings.instance_id)
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
                    _supervise_once(stack, None)
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
        if args.report and ev.last(log, "RunCompleted") is None:
            print(f"no report written to {args.report}: the run did not complete ({run_end.state(log)})")
        elif args.report:
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
        "served": MessageToDict(done.served) if done.HasField("served") else None,
        "greedy_tokens_equal": before == after,
        "swapped_targets": list(done.swapped_targets),
        "targets": target_results(log),
        "events": [
            {"seq": r.seq, "type": r.type, "producer": r.env.producer, "payload": MessageToDict(r.msg)} for r in log
        ],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1))
    print(f"report written to {path}")


def _outcome_lines(log: list[ev.Recorded]) -> list[str]:
    """The summary's outcome and decode lines: the before/after ratio is headlined on the outcome line only
    when it lies outside the decode measure's noise band on the run's device (describe.DECODE_NOISE_BAND)."""
    completed = ev.last(log, "RunCompleted")
    if completed is None:  # it failed or was cancelled: the log says why
        return [f"outcome: {run_end.state(log)}"]
    done = completed.msg
    device = done.observed.device
    ratio = decode_ratio(done.speedup, device)
    headline = ""
    if done.HasField("served"):  # schema 11: the served load at each level, judged by its own intervals
        lines = [f"outcome: {done.outcome}, target {done.target_class or '-'}, reward {done.reward:+d}"]
        return lines + served_text.run_lines(done)
    if outside_noise(done.speedup, device):
        headline = f", decode x{done.speedup:.2f} {'faster' if done.speedup > 1 else 'slower'}"
    lines = [f"outcome: {done.outcome}{headline}, target {done.target_class or '-'}, reward {done.reward:+d}"]
    results = target_results(log)
    if len(results) > 1:  # several targets, in turn: each one's end
        lines.append("targets: " + "; ".join(f"{t['target'].rsplit('.', 1)[-1]} {t['result']}" for t in results))
    lines.append(f"decode: {done.tokens_per_s_before:.1f} -> {done.tokens_per_s_after:.1f} tok/s: {ratio}")
    return lines


def target_results(log: list[ev.Recorded]) -> list[dict]:
    """Each target the run worked on, in order: its best reward and how its work ended."""
    out: dict[str, dict] = {}
    for rec in log:
        msg = rec.msg
        if rec.type == "TargetConcluded":
            result = f"reward {msg.reward:+d}, " + ("swap asked" if msg.swap else "no swap")
            out.setdefault(msg.target_class, {"target": msg.target_class, "reward": msg.reward, "result": result})
        elif rec.type in ("SwapCommitted", "SwapRejected") and msg.target_class in out:
            entry = out[msg.target_class]
            entry["result"] = f"reward {entry['reward']:+d}, " + (
                "swapped" if rec.type == "SwapCommitted" else f"swap rejected: {msg.reason[:80]}"
            )
    return list(out.values())


def _summarise(run_id: str, log: list[ev.Recorded], before: list[int], after: list[int], data_dir: Path) -> int:
    from services.core.replay import verify
    from services.registry import rederivers

    done = ev.last(log, "RunCompleted")
    types = [r.type for r in log]
    print()
    print(f"summary of run {run_id}")
    print(f"  events: {', '.join(dict.fromkeys(types))} ({len(types)} in all)")
    for line in _outcome_lines(log):
        print(f"  {line}")
    swapped = "SwapCommitted" in types
    if swapped and "cpu-untimed" in {r.msg.policy.name for r in log if r.type == "RunRequested"}:
        print("  (on CPU the swapped kernel runs in the Triton interpreter, so it is slower: speed is a GPU claim)")
    commits = types.count("SwapCommitted")
    what = ("the swaps" if commits > 1 else "the swap") if swapped else "the run (nothing was swapped)"
    print(f"  greedy tokens before == after {what}: {before == after} ({len(before)} tokens)")
    mismatches = verify(log, rederivers())
    verdict = "every event re-derived byte for byte" if not mismatches else f"{len(mismatches)} events differ"
    print(f"  replay --verify: {verdict}")
    for m in mismatches:
        print(f"    {m}")
    print(f"  the log stays in {data_dir}: `yantra up --data-dir {data_dir}` then `yantra replay {run_id} --verify`")
    swapped = done is not None and done.msg.outcome == "swapped"
    return 0 if swapped and before == after and not mismatches else 1


def register(sub) -> None:
    sp = sub.add_parser("up", help="start nats-server and all five services; Ctrl-C stops them")
    add_common(sp, model=True)
    add_nats_port(sp)
    sp.add_argument(
        "--cluster",
        type=bounded(3, 5),
        metavar="N",
        help="run N nats-server nodes (3 to 5) on 127.0.0.1 instead of one, each stream kept on every node, so the"
        " stack rides out the loss of a node; stores, configs and logs under DIR/nats-cluster",
    )
    _add_judges(sp)
    _add_security(sp)
    sp.set_defaults(fn=cmd_up)

    sp = sub.add_parser("demo", help="up + optimize + summary + shut down (the main job)")
    add_common(sp, model=True)
    add_nats_port(sp)
    add_run_options(sp)
    sp.add_argument("--report", metavar="FILE", help="write the run's result and event log as JSON")
    sp.add_argument("--export", metavar="FILE", help="write the run's event log for `yantra tui --replay FILE`")
    _add_judges(sp)
    _add_security(sp)
    sp.set_defaults(fn=cmd_demo)


def _add_judges(sp) -> None:
    sp.add_argument(
        "--judges",
        type=bounded(1, MAX_JUDGES),
        metavar="N",
        help="run N judge processes (judge-1 .. judge-N, default 1 or YANTRA_JUDGES) on one durable consumer, so a"
        " search step's candidates are judged at once; on a GPU box each judge gets a GPU of its own, round-robin",
    )


def _add_security(sp) -> None:
    sp.add_argument(
        "--secure",
        action="store_true",
        help="the embedded nats-server (or cluster) requires a user per service (the APP account; each service gets"
        " only its own password) and TLS on its client port and routes, with a CA and certificate made in DIR/secure"
        " the first time and reused after (or YANTRA_SECURE=1); commands on the same data dir find the CA and their"
        " user there",
    )
    sp.add_argument(
        "--nats-host",
        metavar="HOST",
        help="where the embedded nats-server (or each node) listens (default 127.0.0.1, or YANTRA_NATS_HOST); beyond"
        " loopback (0.0.0.0, a network address) only with --secure",
    )
