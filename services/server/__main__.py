"""`python -m services.server`: load the model, serve gRPC (and the OpenAI-compatible HTTP API when
YANTRA_HTTP_ADDR is set), answer swap events, publish metrics."""

from __future__ import annotations

import asyncio
import logging
import secrets
import sys

import grpc

from services.core.admin_auth import exposed_without_token
from services.core.runner import run_service
from services.core.service_main import Setup, configure_logging, main, settings_or_exit
from services.core.settings import Settings
from services.server.engine import Engine, ModelNotServable
from services.server.grpc_api import AddressUnavailable, address_problem, bind_grpc
from services.server.http_api import HttpApi, start_http
from services.server.metrics import default_server_id, metrics_loop
from services.server.models import UnknownModel, load_model
from services.server.prometheus import Exporter
from services.server.restore import restore_swaps
from services.server.service import ServerService, exit_after_hung_sweeps, request_rollbacks, shadow_loop
from services.server.swaps import SwapRegistry

log = logging.getLogger("services.server")
GRACE_S = 2.0


async def serve_grpc(
    engine: Engine, server: grpc.aio.Server, stop: asyncio.Event, ready: str, http: HttpApi | None = None
) -> None:
    """Serve until `stop`; then both APIs finish what they answer (GRACE_S) before the engine closes."""
    await server.start()
    if http is not None:
        http.ready = True  # it listened from the start, answering 503 while the swaps were restored
    log.info("%s", ready)
    try:
        await stop.wait()
    finally:
        await asyncio.gather(server.stop(GRACE_S), http.close(GRACE_S) if http is not None else asyncio.sleep(0))
        engine.close()


def make_setup(engine: Engine, instance_id: str) -> Setup:
    async def setup(settings: Settings, bus, stop: asyncio.Event):
        addr, token = settings.server_addr, settings.admin_token
        swaps = SwapRegistry()  # the swap handler's bookkeeping, read by gRPC and the metrics
        try:  # the port first (serving once swaps are restored): a server that cannot own it must not run at all
            server, port = bind_grpc(engine, addr, token, instance_id, swaps)
        except AddressUnavailable:
            await bus.close()
            raise
        # One registry for the Prometheus port and the HTTP API's /metrics.
        exporter = Exporter(engine, swaps) if settings.metrics_addr or settings.http_addr else None
        if exporter is not None and settings.metrics_addr:
            try:
                exporter.serve(settings.metrics_addr)
            except (OSError, ValueError) as exc:
                await bus.close()
                raise AddressUnavailable(f"cannot serve Prometheus metrics on {settings.metrics_addr}: {exc}") from exc
            log.info("Prometheus metrics on http://%s/metrics", settings.metrics_addr)
        http = None
        if settings.http_addr:
            try:
                http, http_port = await start_http(
                    engine, settings.http_addr, exporter and exporter.registry, ready=False
                )
            except AddressUnavailable:
                await bus.close()
                raise
            host = settings.http_addr.rsplit(":", 1)[0]
            log.info("OpenAI-compatible HTTP API on http://%s:%d/v1 (and /health, /metrics)", host, http_port)
        guarded = "admin RPCs need YANTRA_ADMIN_TOKEN" if token else "admin RPCs open (no YANTRA_ADMIN_TOKEN)"
        ready = f"server ready on {addr.rsplit(':', 1)[0]}:{port} ({guarded}; instance {instance_id})"
        service = ServerService(engine, settings.data_dir, swaps=swaps, shadow_calls=settings.shadow_calls)
        restored = await restore_swaps(bus, service, engine.loaded.name) if settings.restore_swaps else []
        if restored:
            log.info("re-applied %d swap(s) from the log: %s", len(restored), ", ".join(restored))
        return [
            serve_grpc(engine, server, stop, ready, http),
            run_service(bus, service, stop, settings.ack_wait_s),
            request_rollbacks(bus, service, stop),
            exit_after_hung_sweeps(bus, service, stop),
            shadow_loop(service, stop),
            metrics_loop(bus, engine, swaps, stop, default_server_id(settings.server_addr)),
        ]

    return setup


def run() -> int:
    settings = settings_or_exit("server")
    configure_logging("server", settings.log_level)
    # A taken port and a bad model name fail fast with status 2 (a configuration error: `yantra up` stops):
    # the port is looked at before the model loads, and bound for good (exclusively) before swaps are restored.
    # A port beyond loopback without the admin token is refused before anything is bound or loaded.
    problem = exposed_without_token(settings.server_addr, settings.admin_token)
    if not problem and settings.http_addr:
        problem = exposed_without_token(settings.http_addr, settings.admin_token, "YANTRA_HTTP_ADDR")
    problem = problem or address_problem(settings.server_addr)
    if not problem and settings.http_addr:
        problem = address_problem(settings.http_addr, "YANTRA_HTTP_ADDR")
    if problem:
        log.error("server: %s", problem)
        return 2
    try:
        loaded = load_model(settings.model, settings.device, packed_gqa=settings.packed_gqa)
    except UnknownModel as exc:
        log.error("server: %s", exc)
        return 2
    log.info("loaded %s on %s (%s)", loaded.name, loaded.device, loaded.dtype)
    sys.setswitchinterval(settings.switch_interval_ms / 1000)  # the engine thread and the event loop share the lock
    try:
        engine = Engine(
            loaded,
            max_active=settings.max_requests,
            graphs=settings.graphs,
            slots=settings.batch,
            prefill_groups=settings.prefill_groups,
        )
    except ModelNotServable as exc:
        log.error("server: %s", exc)
        return 2
    try:
        return main("server", make_setup(engine, settings.instance_id or secrets.token_hex(8)))
    except AddressUnavailable as exc:
        log.error("server: %s", exc)
        return 2


if __name__ == "__main__":
    raise SystemExit(run())
