"""`python -m services.profiler`: wiring only.

YANTRA_PROFILER_CALL_TIMEOUT_S (default 600) is the deadline of each CaptureProfile/MeasureDecode call, read here
(the shared settings are another module's); a value that is not a positive number of seconds stops the process
with status 2, a configuration error, before it connects to anything.
"""

from __future__ import annotations

import asyncio
import os
import sys

from services.core.bus import Bus
from services.core.runner import run_service
from services.core.service_main import main
from services.core.settings import Settings
from services.profiler.adapters import AdminClient, timeout_from_env
from services.profiler.served_load import ServedLoadClient
from services.profiler.service import ProfilerService


async def setup(settings: Settings, bus: Bus, stop: asyncio.Event):
    admin = AdminClient(settings.server_addr, token=settings.admin_token, timeout_s=timeout_from_env(os.environ))

    async def serve() -> None:
        try:
            # The bus goes to the service too: it watches a run it is measuring for a cancel (RunCancelled).
            # The served load is measured as a client of Generate, where users are served, before and after a run.
            service = ProfilerService(admin, bus=bus, served=ServedLoadClient(settings.server_addr))
            await run_service(bus, service, stop, settings.ack_wait_s)
        finally:
            await admin.close()

    return [serve()]


if __name__ == "__main__":
    try:
        timeout_from_env(os.environ)
    except ValueError as exc:
        print(f"profiler: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    raise SystemExit(main("profiler", setup))
