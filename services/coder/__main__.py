"""python -m services.coder: run the coder as its own process (wiring only)."""

from __future__ import annotations

import asyncio

from services.coder.authors import Budget
from services.coder.llm_providers import providers_from
from services.coder.service import CoderService
from services.core.bus import Bus
from services.core.runner import run_service
from services.core.service_main import main
from services.core.settings import Settings


async def setup(settings: Settings, bus: Bus, stop: asyncio.Event) -> list:
    budget = Budget(settings.llm_max_calls, settings.llm_max_tokens, settings.llm_retries)
    coder = CoderService(providers_from(settings), budget)
    return [run_service(bus, coder, stop, settings.ack_wait_s)]


if __name__ == "__main__":
    raise SystemExit(main("coder", setup))
