"""`python -m services.skillstore`: wiring only."""

from __future__ import annotations

import asyncio
import logging

from services.core.bus import Bus
from services.core.runner import run_service
from services.core.service_main import configure_logging, main, settings_or_exit
from services.core.settings import Settings
from services.skillstore.library import IndexUnavailable, JsonSkillLibrary, SkillIndex
from services.skillstore.service import SkillstoreService, run_index_projector

log = logging.getLogger(__name__)

# How long a starting skill store waits for a Weaviate that does not answer (compose starts them together).
WEAVIATE_PATIENCE_S = 30.0


def open_index(settings: Settings) -> SkillIndex:
    """The index WEAVIATE_URL names, else the embedded library in the data directory."""
    if not settings.weaviate_url:
        return JsonSkillLibrary(settings.data_dir / "skills")
    from services.skillstore.weaviate_index import connect  # the client is an optional dependency

    return connect(settings.weaviate_url, patience_s=WEAVIATE_PATIENCE_S)


def make_setup(index: SkillIndex):
    async def setup(settings: Settings, bus: Bus, stop: asyncio.Event):
        return [
            run_service(bus, SkillstoreService(index), stop, settings.ack_wait_s),
            run_index_projector(bus, index, stop),
        ]

    return setup


def run() -> int:
    settings = settings_or_exit("skillstore")
    configure_logging("skillstore", settings.log_level)
    try:
        index = open_index(settings)
    except IndexUnavailable as exc:  # a configuration error or a Weaviate that never answered: one line, status 2
        log.error("skillstore: %s", exc)
        return 2
    try:
        return main("skillstore", make_setup(index))
    finally:
        index.close()


if __name__ == "__main__":
    raise SystemExit(run())
