"""python -m services.judge: run the judge as its own process (wiring only).

YANTRA_JUDGE_TIMEOUT_S overrides the sandbox timeout (default 300 s on a GPU, 600 s on CPU). YANTRA_JUDGE_ID names
this judge among many (`yantra up --judges N` gives judge-1 .. judge-N; unset: its host and pid); every judge
consumes the one durable consumer "judge", so JetStream hands each candidate to one of them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys

from services.core.bus import Bus
from services.core.runner import run_service
from services.core.service_main import main
from services.core.settings import Settings
from services.judge.identity import JUDGE_ID_VAR, BadJudgeId, judge_id
from services.judge.service import JudgeService

log = logging.getLogger(__name__)


def _judge_id() -> str:
    try:
        return judge_id(os.environ.get(JUDGE_ID_VAR, ""), socket.gethostname(), os.getpid())
    except BadJudgeId as exc:  # a configuration error: exit 2, which `yantra up` does not restart
        print(f"judge: cannot start: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


async def setup(settings: Settings, bus: Bus, stop: asyncio.Event) -> list:
    timeout = os.environ.get("YANTRA_JUDGE_TIMEOUT_S", "")
    try:
        seconds = float(timeout) if timeout else None
        judge = JudgeService(
            device=settings.device, timeout_s=seconds, scratch_dir=settings.data_dir / "judge", judge_id=_judge_id()
        )
    except ValueError as exc:  # a bad setting is a clear message, not a traceback
        raise SystemExit(f"judge: cannot start: {exc} (YANTRA_JUDGE_TIMEOUT_S={timeout!r})") from None
    log.info("judge %s judges on %s", judge.judge_id, judge.device)
    return [run_service(bus, judge, stop, settings.ack_wait_s)]


if __name__ == "__main__":
    _judge_id()  # a bad YANTRA_JUDGE_ID stops it before it connects
    raise SystemExit(main("judge", setup))
