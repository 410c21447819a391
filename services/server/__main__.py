"""`python -m services.server`: load the model, serve gRPC, answer swap events, publish metrics."""

from __future__ import annotations

import asyncio
import logging

from services.core.runner import run_service
from services.core.service_main import Setup, configure_logging, main
from services.core.settings import Settings
from services.server.engine import Engine
from services.server.grpc_api import start_grpc
from services.server.metrics import default_server_id, metrics_loop
from services.server.models import UnknownModel, load_model
from services.server.restore import restore_swaps
from services.server.service import ServerService, request_rollbacks

log = logging.getLogger("services.server")
GRACE_S = 2.0


async def serve_grpc(engine: Engine, addr: str, stop: asyncio.Event, admin_token: str = "") -> None:
    server, port = await start_grpc(engine, addr, admin_token)
    guarded = "admin RPCs need YANTRA_ADMIN_TOKEN" if admin_token else "admin RPCs open (no YANTRA_ADMIN_TOKEN)"
    log.info("server ready on %s (%s)", f"{addr.rsplit(':', 1)[0]}:{port}", guarded)
    try:
        await stop.wait()
    finally:
        await server.stop(GRACE_S)
        engine.close()


def make_setup(engine: Engine) -> Setup:
    async def setup(settings: Settings, bus, stop: asyncio.Event):
        service = ServerService(engine, settings.data_dir)
        if service.static_check is None:
            log.warning("static check unavailable: every swap will be rejected until services.judge is installed")
        restored = await restore_swaps(bus, service, engine.loaded.name) if settings.restore_swaps else []
        if restored:
            log.info("re-applied %d swap(s) from the log: %s", len(restored), ", ".join(restored))
        return [
            serve_grpc(engine, settings.server_addr, stop, settings.admin_token),
            run_service(bus, service, stop, settings.ack_wait_s),
            request_rollbacks(bus, service, stop),
            metrics_loop(bus, engine, stop, default_server_id(settings.server_addr)),
        ]

    return setup


def run() -> int:
    settings = Settings.from_env()
    configure_logging("server", settings.log_level)
    # The model loads before the bus connects, so a bad model name fails fast with status 2.
    try:
        loaded = load_model(settings.model, settings.device)
    except UnknownModel as exc:
        log.error("server: %s", exc)
        return 2
    log.info("loaded %s on %s (%s)", loaded.name, loaded.device, loaded.dtype)
    return main("server", make_setup(Engine(loaded)))


if __name__ == "__main__":
    raise SystemExit(run())
