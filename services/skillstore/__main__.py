"""`python -m services.skillstore`: wiring only."""

from __future__ import annotations

import asyncio

from services.core.bus import Bus
from services.core.runner import run_service
from services.core.service_main import main
from services.core.settings import Settings
from services.skillstore.library import JsonSkillLibrary
from services.skillstore.service import SkillstoreService, run_index_projector


async def setup(settings: Settings, bus: Bus, stop: asyncio.Event):
    library = JsonSkillLibrary(settings.data_dir / "skills")
    return [
        run_service(bus, SkillstoreService(library), stop, settings.ack_wait_s),
        run_index_projector(bus, library, stop),
    ]


if __name__ == "__main__":
    raise SystemExit(main("skillstore", setup))
