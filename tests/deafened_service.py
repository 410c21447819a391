"""A service whose NATS connection is closed for good by its first trigger, run as its own process by
tests/test_poison_messages.py.

It is wired like every real service (services.core.service_main) and consumes RunRequested as the durable
DEAF_DURABLE. Its handler prints `handling <seq>`, then sends what a dead letter of a ~1 MiB message used to: a
message whose headers take it over the server's max_payload. The server answers that by closing the connection,
and nats-py does not reopen a connection closed so. With DEAF_HANG=1 the handler then waits for ever (as one
waiting on a gRPC call would), so only a watch on the connection itself can notice.
"""

from __future__ import annotations

import asyncio
import os

from services.core.runner import run_service
from services.core.service_main import main


class Deafened:
    name = os.environ.get("DEAF_DURABLE", "deaf")
    consumes = ("RunRequested",)

    def __init__(self, bus):
        self.bus = bus

    async def handle(self, trigger, prior):
        print(f"handling {trigger.seq}", flush=True)
        nc = self.bus.nc
        await nc.publish("yantra.nowhere", b"\0" * nc.max_payload, headers={"Yantra-Reason": "over max_payload"})
        if os.environ.get("DEAF_HANG") == "1":
            await asyncio.Event().wait()
        return []


async def setup(settings, bus, stop):
    return [run_service(bus, Deafened(bus), stop, settings.ack_wait_s)]


if __name__ == "__main__":
    raise SystemExit(main(Deafened.name, setup))
