"""gRPC: public streaming generation and the read-mostly admin RPCs, over grpc.aio.

Bad arguments are answered with INVALID_ARGUMENT (or NOT_FOUND for an unknown class) and a message
that names the problem, and so is a body that does not decode (a string field that is not UTF-8, say);
a failure inside the model is INTERNAL with its cause, never a dead server. How much one request may ask for
(prompts, their length, repeats) is bounded before any of it is encoded, by `services.core.limits`, and a
refusal names the limit. A measuring RPC whose caller goes (its deadline passed, or it cancelled) stops the
engine's work at its next decode step (`Engine.exclusive`), so the model serves Generate again at once.

The server binds its port exclusively (no SO_REUSEPORT): a second server on the same address fails to
start with AddressUnavailable instead of sharing the port and answering every other request.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import secrets
import socket

import grpc
from google.protobuf.message import DecodeError
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from grpc_reflection.v1alpha import reflection

from services.core import limits
from services.core.admin_auth import authorized, needs_token
from services.core.pb import inference_pb2 as ipb
from services.core.pb import inference_pb2_grpc as ipb_grpc
from services.server.engine import BadRequest, Engine
from services.server.requests import Ended, busy_problem, check_new_tokens, check_request, generate_text
from services.server.sampling import Sampling
from services.server.stats import CountRefused
from services.server.swaps import SwapRegistry

log = logging.getLogger(__name__)

DEFAULT_ADMIN_TOKENS = 16  # when an admin request leaves max_new_tokens at 0


class AddressUnavailable(RuntimeError):
    """The gRPC address cannot be listened on (another server holds it, say); the message says which and why."""


def request_sampling(request: ipb.GenerateRequest) -> Sampling:
    return Sampling(
        temperature=request.temperature,
        top_p=request.top_p or 1.0,
        seed=request.seed if request.HasField("seed") else None,
    )


def request_ids(engine: Engine, request: ipb.GenerateRequest) -> list[int]:
    """The prompt's token ids after every check a request must pass (services.server.requests); BadRequest says
    what is wrong."""
    checked = check_request(
        engine,
        prompt=request.prompt,
        token_ids=request.token_ids,
        max_new_tokens=request.max_new_tokens,
        sampling=request_sampling(request),
        stop=request.stop,
    )
    return checked.ids


def admin_tokens(engine: Engine, prompts: list[str], max_new_tokens: int) -> int:
    """New tokens per prompt of a measuring RPC (0: DEFAULT_ADMIN_TOKENS), within the bound of the longest prompt."""
    max_new_tokens = max_new_tokens or DEFAULT_ADMIN_TOKENS
    check_new_tokens(engine, max(len(engine.encode(p)) for p in prompts), max_new_tokens)
    return max_new_tokens


def admin_repeats(repeats: int) -> int:
    if repeats > limits.MAX_MEASURE_REPEATS:
        raise BadRequest(f"repeats must be at most {limits.MAX_MEASURE_REPEATS}, got {repeats}")
    return repeats or 1


def admin_prompts(prompts, rpc: str) -> list[str]:
    """The prompts of a measuring RPC, bounded (count, length) before any is encoded: encoding runs on the event
    loop, and each prompt is decoded over and over while the model is held."""
    prompts = list(prompts)
    problem = limits.prompts_problem(prompts, rpc)
    if problem:
        raise BadRequest(problem)
    if not prompts or not all(prompts):
        raise BadRequest("give at least one prompt, and no empty prompts")
    return prompts


class InferenceApi(ipb_grpc.InferenceServicer):
    def __init__(self, engine: Engine):
        self.engine = engine

    async def Generate(self, request, context):
        try:
            ids = request_ids(self.engine, request)
        except BadRequest as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        busy = busy_problem(self.engine)
        if busy:  # checked with no await before the engine counts the request: exact
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, busy)
        pieces = generate_text(
            self.engine,
            ids,
            request.max_new_tokens,
            sampling=request_sampling(request),
            stop=request.stop,
            ignore_eos=request.ignore_eos,
        )
        try:
            async with contextlib.aclosing(pieces):  # a client that goes closes it: the request is cancelled
                async for piece in pieces:
                    if isinstance(piece, Ended):
                        yield ipb.GenerateChunk(
                            done=True,
                            text=piece.text,
                            tokens_per_s=piece.tokens_per_s,
                            finish_reason=piece.finish_reason,
                        )
                    else:
                        yield ipb.GenerateChunk(token_ids=piece.token_ids, text=piece.text)
        except Exception as exc:
            log.exception("generation failed")
            await context.abort(grpc.StatusCode.INTERNAL, f"generation failed: {type(exc).__name__}: {exc}")


class AdminApi(ipb_grpc.AdminServicer):
    def __init__(self, engine: Engine, instance_id: str, swaps: SwapRegistry):
        self.engine = engine
        self.instance_id = instance_id
        self.swaps = swaps  # the swap handling's registry (ServerService.swaps), read here

    async def Health(self, request, context):
        e = self.engine
        return ipb.HealthReply(
            ready=True,
            model=e.loaded.name,
            device=e.loaded.device,
            dtype=e.dtype,
            active_swaps=self.swaps.active_count(),
            requests_served=e.stats.requests_served,
            instance_id=self.instance_id,
            max_positions=e.loaded.max_positions,
            graphs_stale=e.graphs_stale(),
        )

    async def _on_prompts(self, request, context, rpc: str, what: str, work):
        """Check the prompts/tokens/repeats every measuring RPC takes, run `work` on them, map failures to statuses.
        A caller that goes (deadline, cancel) cancels this coroutine, and with it the engine's work."""
        try:
            prompts = admin_prompts(request.prompts, rpc)
            args = prompts, admin_tokens(self.engine, prompts, request.max_new_tokens), admin_repeats(request.repeats)
            return await work(*args)
        except asyncio.CancelledError:
            log.info("%s: the caller went (deadline or cancel); the engine's work was stopped", rpc)
            raise
        except BadRequest as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except Exception as exc:
            log.exception("%s failed", what)
            await context.abort(grpc.StatusCode.INTERNAL, f"{what} failed: {type(exc).__name__}: {exc}")

    async def CaptureProfile(self, request, context):
        observation = await self._on_prompts(
            request, context, "CaptureProfile", "profile capture", self.engine.capture_profile
        )
        return ipb.CaptureProfileReply(observation=observation)

    async def MeasureDecode(self, request, context):
        m = await self._on_prompts(request, context, "MeasureDecode", "decode measurement", self.engine.measure_decode)
        return ipb.MeasureDecodeReply(
            tokens_per_s=m.tokens_per_s, tokens_generated=m.tokens, seconds=m.seconds, device=self.engine.loaded.device
        )

    async def GetModuleState(self, request, context):
        if not request.class_path:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "class_path is empty")
        state = self.engine.module_state(request.class_path)
        if state is None:
            await context.abort(
                grpc.StatusCode.NOT_FOUND, f"no module class or function {request.class_path} in the model"
            )
        introspection, instances, patched = state
        active = self.swaps.active_for(request.class_path)
        return ipb.ModuleStateReply(
            introspection=introspection,
            instances=instances,
            patched=patched,
            active_swap_id=active.swap_id if active else "",
        )

    async def ListSwaps(self, request, context):
        return ipb.ListSwapsReply(swaps=self.swaps.records())

    async def ServingLatency(self, request, context):
        if request.window_s < 0:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"window_s must be >= 0, got {request.window_s}")
        parts = [
            ipb.LatencyPart(name=p.name, count=p.count, p50_ms=p.p50_s * 1e3, p99_ms=p.p99_s * 1e3,
                            max_ms=p.max_s * 1e3, mean_ms=p.mean_s * 1e3)
            for p in self.engine.stats.parts.window(request.window_s)
        ]  # fmt: skip
        return ipb.ServingLatencyReply(window_s=request.window_s, parts=parts)


class AdminToken(grpc.aio.ServerInterceptor):
    """Admin RPCs (Health excepted) answer UNAUTHENTICATED unless the call carries the admin token."""

    def __init__(self, token: str):
        self.token = token

        async def refuse(request, context):
            await context.abort(
                grpc.StatusCode.UNAUTHENTICATED,
                "admin RPCs need the server's admin token: set YANTRA_ADMIN_TOKEN to the same value as the server's",
            )

        self._refusal = grpc.unary_unary_rpc_method_handler(refuse)

    async def intercept_service(self, continuation, handler_call_details):
        method = handler_call_details.method
        if needs_token(method) and not authorized(handler_call_details.invocation_metadata, self.token):
            log.warning("refused %s: no valid admin token", method)
            return self._refusal
        return await continuation(handler_call_details)


class UndecodableRequest(grpc.aio.ServerInterceptor):
    """A request body that does not parse (a string field holding bytes that are not UTF-8, a truncated message)
    is INVALID_ARGUMENT naming the RPC, on every RPC, instead of the UNKNOWN grpc.aio answers by default."""

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None:
            return handler
        method = handler_call_details.method.rsplit("/", 1)[-1]
        return _guarded(handler, method)


class _BadBody:
    """What the request deserializer hands the behaviour in place of a request it could not decode."""

    def __init__(self, detail: str):
        self.detail = detail


def _guarded(handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
    decode = handler.request_deserializer

    def deserialize(body: bytes):
        try:
            return decode(body)
        except DecodeError as exc:
            why = "a malformed body, or a text field that is not valid UTF-8"
            return _BadBody(f"{method}: cannot decode the request ({exc}): {why}")

    async def refuse(request, context):
        log.warning("refused %s: %s", method, request.detail)
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.detail)

    serialize = handler.response_serializer
    if handler.unary_unary:
        behaviour = handler.unary_unary

        async def unary_unary(request, context):
            if isinstance(request, _BadBody):
                await refuse(request, context)
            return await behaviour(request, context)

        return grpc.unary_unary_rpc_method_handler(unary_unary, deserialize, serialize)
    if handler.unary_stream:
        behaviour = handler.unary_stream

        async def unary_stream(request, context):
            if isinstance(request, _BadBody):
                await refuse(request, context)
            async for reply in behaviour(request, context):
                yield reply

        return grpc.unary_stream_rpc_method_handler(unary_stream, deserialize, serialize)
    return handler  # no client-streaming RPCs in this server


def address_problem(addr: str, setting: str = "YANTRA_SERVER_ADDR") -> str | None:
    """Why `addr` ("host:port") cannot be listened on exclusively, in one line; None when it can right now.
    `setting` is the variable a user sets to move it."""
    host, _, port = addr.rpartition(":")
    host = host.strip("[]")
    try:
        family, kind, proto, _, sockaddr = socket.getaddrinfo(host or None, int(port), type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC does: TIME_WAIT is no conflict
            sock.bind(sockaddr)
            sock.listen()
    except ValueError:
        return f"cannot listen on {addr}: not a host:port address"
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return (
                f"cannot listen on {addr}: another server holds that port; stop it, or set {setting} to a free address"
            )
        return f"cannot listen on {addr}: {exc.strerror or exc}"
    return None


_background: set = set()  # tasks kept alive until done


def add_health_and_reflection(server: grpc.aio.Server) -> None:
    """The standard gRPC health service (load balancers, `grpc_health_probe`) and server reflection (grpcurl)."""
    services = [ipb.DESCRIPTOR.services_by_name[name].full_name for name in ("Inference", "Admin")]
    health = health_aio.HealthServicer()  # "" (the server as a whole) starts SERVING
    for name in services:  # set before the server starts taking calls (this runs inside the event loop)
        _background.add(
            asyncio.get_running_loop().create_task(health.set(name, health_pb2.HealthCheckResponse.SERVING))
        )
    _background.difference_update({t for t in _background if t.done()})
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    reflection.enable_server_reflection([*services, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                                         reflection.SERVICE_NAME], server)  # fmt: skip


def bind_grpc(
    engine: Engine, addr: str, admin_token: str = "", instance_id: str = "", swaps: SwapRegistry | None = None
) -> tuple[grpc.aio.Server, int]:
    """Both services bound to `addr` ("host:port", port 0 picks one), not serving until `await server.start()`;
    returns the server and its port. Call it with an event loop running.

    The port is bound exclusively: when another server holds it this raises AddressUnavailable, saying so.
    With `admin_token`, the Admin RPCs other than Health require it (services.core.admin_auth).
    Health answers with `instance_id` (a random one when empty), so a client can tell which server answers.
    `swaps` is the registry ListSwaps, GetModuleState and Health read (the swap handler's; a fresh one if none).
    """
    interceptors = [AdminToken(admin_token)] if admin_token else []
    interceptors += [CountRefused(engine.stats), UndecodableRequest()]  # refusals counted, undecodable ones too
    server = grpc.aio.server(interceptors=interceptors, options=[("grpc.so_reuseport", 0)])
    ipb_grpc.add_InferenceServicer_to_server(InferenceApi(engine), server)
    admin = AdminApi(engine, instance_id or secrets.token_hex(8), swaps if swaps is not None else SwapRegistry())
    ipb_grpc.add_AdminServicer_to_server(admin, server)
    add_health_and_reflection(server)
    try:
        port = server.add_insecure_port(addr)
    except RuntimeError:
        port = 0
    if port == 0:
        raise AddressUnavailable(address_problem(addr) or f"cannot listen on {addr}")
    return server, port


async def start_grpc(
    engine: Engine, addr: str, admin_token: str = "", instance_id: str = "", swaps: SwapRegistry | None = None
) -> tuple[grpc.aio.Server, int]:
    """bind_grpc, then serve: returns the started server and its port."""
    server, port = bind_grpc(engine, addr, admin_token, instance_id, swaps)
    await server.start()
    return server, port
