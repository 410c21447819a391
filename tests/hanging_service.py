"""A service whose handler never finishes, run as its own process by tests/test_bus.py.

It is wired like every real service (services.core.service_main: settings from the environment, the
signal handlers, the runner), consumes RunRequested as the durable HANG_DURABLE, prints
`handling <seq>` when its handler starts, and then waits forever (yielding to the event loop, as a
real handler waiting on a sandbox or a gRPC call does; with HANG_IN_THREAD=1 in a thread, as a model loading or
a kernel compiling does, which no cancellation stops).
"""

from __future__ import annotations

import asyncio
import os
import threading

from services.core.runner import run_service
from services.core.service_main import main


class Hanging:
    name = os.environ.get("HANG_DURABLE", "hang")
    consumes = ("RunRequested",)

    async def handle(self, trigger, prior):
        print(f"handling {trigger.seq}", flush=True)
        if os.environ.get("HANG_IN_THREAD") == "1":
            await asyncio.to_thread(threading.Event().wait)
        await asyncio.Event().wait()
        return []


async def setup(settings, bus, stop):
    return [run_service(bus, Hanging(), stop, settings.ack_wait_s)]


if __name__ == "__main__":
    raise SystemExit(main(Hanging.name, setup))
