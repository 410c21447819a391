"""gRPC: public streaming generation and the read-mostly admin RPCs, over grpc.aio.

Bad arguments are answered with INVALID_ARGUMENT (or NOT_FOUND for an unknown class) and a message
that names the problem; a failure inside the model is INTERNAL with its cause, never a dead server.
"""

from __future__ import annotations

import logging
import time

import grpc

from services.core.admin_auth import authorized, needs_token
from services.core.pb import inference_pb2 as ipb
from services.core.pb import inference_pb2_grpc as ipb_grpc
from services.server.engine import MAX_NEW_TOKENS, BadRequest, Engine
from services.server.tokenizer import IncrementalText

log = logging.getLogger(__name__)

DEFAULT_ADMIN_TOKENS = 16  # when an admin request leaves max_new_tokens at 0
MAX_REPEATS = 100


def request_ids(engine: Engine, request: ipb.GenerateRequest) -> list[int]:
    """The prompt's token ids after every check a request must pass; BadRequest says what is wrong."""
    if request.max_new_tokens == 0:
        raise BadRequest(f"max_new_tokens must be 1..{MAX_NEW_TOKENS}, got 0")
    ids = list(request.token_ids) if request.token_ids else engine.encode(request.prompt) if request.prompt else []
    engine.check(ids, request.max_new_tokens)
    return ids


def admin_tokens(max_new_tokens: int) -> int:
    if max_new_tokens > MAX_NEW_TOKENS:
        raise BadRequest(f"max_new_tokens must be at most {MAX_NEW_TOKENS}, got {max_new_tokens}")
    return max_new_tokens or DEFAULT_ADMIN_TOKENS


def admin_repeats(repeats: int) -> int:
    if repeats > MAX_REPEATS:
        raise BadRequest(f"repeats must be at most {MAX_REPEATS}, got {repeats}")
    return repeats or 1


def admin_prompts(prompts) -> list[str]:
    prompts = list(prompts)
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
        text = IncrementalText(self.engine.tokenizer)
        produced = 0
        t0 = time.perf_counter()
        try:
            async for chunk in self.engine.generate(ids, request.max_new_tokens):
                produced += len(chunk)
                yield ipb.GenerateChunk(token_ids=chunk, text=text.push(chunk))
        except Exception as exc:
            log.exception("generation failed")
            await context.abort(grpc.StatusCode.INTERNAL, f"generation failed: {type(exc).__name__}: {exc}")
        seconds = time.perf_counter() - t0
        yield ipb.GenerateChunk(done=True, text=text.flush(), tokens_per_s=produced / seconds if seconds else 0.0)


class AdminApi(ipb_grpc.AdminServicer):
    def __init__(self, engine: Engine):
        self.engine = engine

    async def Health(self, request, context):
        e = self.engine
        return ipb.HealthReply(
            ready=True,
            model=e.loaded.name,
            device=e.loaded.device,
            dtype=e.dtype,
            active_swaps=e.swaps.active_count(),
            requests_served=e.stats.requests_served,
        )

    async def _on_prompts(self, request, context, what: str, work):
        """Check the prompts/tokens/repeats every measuring RPC takes, run `work` on them, map failures to statuses."""
        try:
            args = admin_prompts(request.prompts), admin_tokens(request.max_new_tokens), admin_repeats(request.repeats)
            return await work(*args)
        except BadRequest as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except Exception as exc:
            log.exception("%s failed", what)
            await context.abort(grpc.StatusCode.INTERNAL, f"{what} failed: {type(exc).__name__}: {exc}")

    async def CaptureProfile(self, request, context):
        observation = await self._on_prompts(request, context, "profile capture", self.engine.capture_profile)
        return ipb.CaptureProfileReply(observation=observation)

    async def MeasureDecode(self, request, context):
        m = await self._on_prompts(request, context, "decode measurement", self.engine.measure_decode)
        return ipb.MeasureDecodeReply(tokens_per_s=m.tokens_per_s, tokens_generated=m.tokens, seconds=m.seconds)

    async def GetModuleState(self, request, context):
        if not request.class_path:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "class_path is empty")
        state = self.engine.module_state(request.class_path)
        if state is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no module of class {request.class_path} in the model")
        introspection, instances, patched = state
        active = self.engine.swaps.active_for(request.class_path)
        return ipb.ModuleStateReply(
            introspection=introspection,
            instances=instances,
            patched=patched,
            active_swap_id=active.swap_id if active else "",
        )

    async def ListSwaps(self, request, context):
        return ipb.ListSwapsReply(swaps=self.engine.swaps.records())


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


async def start_grpc(engine: Engine, addr: str, admin_token: str = "") -> tuple[grpc.aio.Server, int]:
    """Serve both services on `addr` ("host:port", port 0 picks one); returns the server and its port.

    With `admin_token`, the Admin RPCs other than Health require it (services.core.admin_auth).
    """
    server = grpc.aio.server(interceptors=[AdminToken(admin_token)] if admin_token else None)
    ipb_grpc.add_InferenceServicer_to_server(InferenceApi(engine), server)
    ipb_grpc.add_AdminServicer_to_server(AdminApi(engine), server)
    try:
        port = server.add_insecure_port(addr)
    except RuntimeError as exc:
        raise RuntimeError(f"cannot listen on {addr}: {exc}") from exc
    if port == 0:
        raise RuntimeError(f"cannot listen on {addr}")
    await server.start()
    return server, port
