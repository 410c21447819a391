"""python -m services.judge: run the judge as its own process (wiring only).

YANTRA_JUDGE_TIMEOUT_S overrides the sandbox timeout (default 300 s on a GPU, 600 s on CPU).
"""

from __future__ import annotations

import asyncio
import os

from services.core.bus import Bus
from services.core.runner import run_service
from services.core.service_main import main
from services.core.settings import Settings
from services.judge.service import JudgeService


async def setup(settings: Settings, bus: Bus, stop: asyncio.Event) -> list:
    timeout = os.environ.get("YANTRA_JUDGE_TIMEOUT_S", "")
    try:
        seconds = float(timeout) if timeout else None
        judge = JudgeService(device=settings.device, timeout_s=seconds, scratch_dir=settings.data_dir / "judge")
    except ValueError as exc:  # a bad setting is a clear message, not a traceback
        raise SystemExit(f"judge: cannot start: {exc} (YANTRA_JUDGE_TIMEOUT_S={timeout!r})") from None
    return [run_service(bus, judge, stop, settings.ack_wait_s)]


if __name__ == "__main__":
    raise SystemExit(main("judge", setup))
