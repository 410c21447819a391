"""`python -m services.profiler`: wiring only."""

from __future__ import annotations

import asyncio

from services.core.bus import Bus
from services.core.runner import run_service
from services.core.service_main import main
from services.core.settings import Settings
from services.profiler.adapters import AdminClient
from services.profiler.service import ProfilerService


async def setup(settings: Settings, bus: Bus, stop: asyncio.Event):
    admin = AdminClient(settings.server_addr, token=settings.admin_token)

    async def serve() -> None:
        try:
            await run_service(bus, ProfilerService(admin), stop, settings.ack_wait_s)
        finally:
            await admin.close()

    return [serve()]


if __name__ == "__main__":
    raise SystemExit(main("profiler", setup))
