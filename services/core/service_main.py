"""Process wiring shared by every service's __main__: settings, bus, signals, clean shutdown."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from contextlib import suppress

from nats.errors import Error as NatsError
from pydantic import ValidationError

from services.core.bus import Bus, BusClosed, BusUnavailable
from services.core.bus_limits import BusLimits, limit_problems
from services.core.nats_security import quiet_tls_eof_warning
from services.core.secrets_env import SecretFileError
from services.core.settings import Settings, redact_url, settings_problem

log = logging.getLogger(__name__)

# (settings, bus, stop) -> the coroutines the process runs until stop is set
Setup = Callable[[Settings, Bus, asyncio.Event], Awaitable[list[Awaitable[None]]]]
# Once told to stop, a service has settings.shutdown_grace_s to hand its messages back and close; then it exits
# outright. A task can be cancelled, a thread cannot: work run in a thread (a model loading, a kernel compiling)
# would hold the process at asyncio.run's executor shutdown for as long as the thread runs (5 minutes at most from
# Python 3.12), and a `yantra up` killed outright, or a `yantra down`, would leave it behind that long.


def exit_if_still_running_after(name: str, grace_s: float) -> threading.Timer:
    """Arm a daemon timer that ends the process (exit status 1) if it is still running `grace_s` from now."""

    def exit_now() -> None:
        log.error("%s did not stop within %.0f s of being told to (work in a thread?): exiting now", name, grace_s)
        for handler in logging.getLogger().handlers:
            handler.flush()
        os._exit(1)

    timer = threading.Timer(grace_s, exit_now)
    timer.daemon = True
    timer.start()
    return timer


def configure_logging(name: str, level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format=f"%(asctime)s {name:<10} %(levelname)-7s %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )
    logging.getLogger("nats").setLevel(logging.WARNING)
    quiet_tls_eof_warning()


# While NATS answers but its JetStream does not (turned off by a full disk until `yantra up` restarts it, or a
# server still starting), a service starting waits for it, saying so every JETSTREAM_WAIT_LOG_S: exiting would
# only spend its restart budget on an outage that outlasts it.
JETSTREAM_WAIT_LOG_S = 30.0


async def connect_with_retry(url: str, name: str, patience_s: float = 30.0) -> Bus:
    """Connect and make the streams: retried for `patience_s` while no NATS answers (then BusUnavailable), and for
    as long as it takes while NATS answers and JetStream does not."""
    loop = asyncio.get_running_loop()
    deadline, said_at = loop.time() + patience_s, None
    while True:
        try:
            return await Bus.connect(url, name=name, timeout=2.0)
        except BusUnavailable:
            if loop.time() > deadline:
                raise
        except (NatsError, TimeoutError) as exc:  # the connection was made: JetStream said no, or nothing
            deadline = loop.time() + patience_s
            if said_at is None or loop.time() - said_at >= JETSTREAM_WAIT_LOG_S:
                said_at = loop.time()
                why = str(exc).strip() or type(exc).__name__
                log.warning("%s: JetStream at %s does not answer (%s); waiting for it", name, redact_url(url), why)
        await asyncio.sleep(0.5)


async def _fail_when_closed(bus: Bus) -> None:
    # A task of the service's own, whatever the others do: a consumer notices a closed connection, but a service
    # waiting on something else (the server's gRPC) would stay up, alive and deaf, and never be restarted.
    why = await bus.closed()
    raise BusClosed(f"the NATS connection was closed for good ({why}); exiting so the supervisor restarts it")


async def serve(name: str, setup: Setup, settings: Settings) -> bool:
    """Run the service until a signal or until one of its tasks ends; False if a task failed, or the bus connection
    was closed for good."""
    if not settings.nats_url:
        raise BusUnavailable("NATS_URL is not set: start everything with `yantra up`, or point NATS_URL at a server")
    bus = await connect_with_retry(settings.nats_url, name)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info("%s connected to %s", name, redact_url(settings.nats_url))  # a URL may carry a password
    tasks = [asyncio.ensure_future(c) for c in await setup(settings, bus, stop)]
    tasks.append(asyncio.ensure_future(_fail_when_closed(bus)))
    waiter = asyncio.ensure_future(stop.wait())
    done, _ = await asyncio.wait([*tasks, waiter], return_when=asyncio.FIRST_COMPLETED)
    exit_if_still_running_after(name, settings.shutdown_grace_s)
    failed = [task.exception() for task in done if task is not waiter and task.exception()]
    for exc in failed:
        log.error("%s: a task failed: %r", name, exc)
    stop.set()
    for task in tasks:
        task.cancel()
    for task in tasks:
        with suppress(asyncio.CancelledError, Exception):
            await task
    await bus.close()
    log.info("%s stopped", name)
    return not failed


def settings_or_exit(name: str) -> Settings:
    """The environment's settings; a bad value, or limits that do not agree (`services.core.bus_limits`: a judge
    timeout past the dedup window, say), is one line on stderr and exit status 2 (a configuration error: `yantra up`
    does not restart it), never a traceback. Checked before anything connects or loads."""
    try:
        settings = Settings.from_env()
    except ValidationError as exc:
        print(f"{name}: {settings_problem(exc)}", file=sys.stderr)
        raise SystemExit(2) from None
    except SecretFileError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    problems = limit_problems(BusLimits.from_env(settings, os.environ))
    if problems:
        print(f"{name}: the bus's limits do not agree: {'; '.join(problems)}", file=sys.stderr)
        raise SystemExit(2)
    return settings


def main(name: str, setup: Setup) -> int:
    settings = settings_or_exit(name)
    configure_logging(name, settings.log_level)
    try:
        if not asyncio.run(serve(name, setup, settings)):
            return 1  # a task failed: exit non-zero so a supervisor restarts the service
    except BusUnavailable as exc:
        log.error("%s: %s", name, exc)
        return 2
    except KeyboardInterrupt:
        pass
    return 0
