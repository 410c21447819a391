"""An OpenAI-compatible HTTP API beside gRPC (YANTRA_HTTP_ADDR; off when unset), so OpenAI clients and the
benchmark tools built on them work against the live server.

    POST /v1/completions, POST /v1/chat/completions   whole, or streamed (`"stream": true`) as server-sent events
                                                      ending with `data: [DONE]`
    GET /v1/models, GET /v1/models/{id}               the one model served
    GET /health                                       200 when serving, 503 while starting or stopping
    GET /metrics                                      Prometheus text: the registry of services/server/prometheus.py

Generation runs gRPC Generate's path (services.server.requests): the same checks, the same refusal of a full
server, the same text stream, counted in the same outcomes. A refusal is an OpenAI error body
{"error": {"message", "type", "param", "code"}}: 400 for bad input (a prompt longer than the context, max_tokens
out of range, temperature or top_p out of range, malformed JSON, a field of the wrong type), 404 for an unknown
model or path, 405 for a wrong method, 413 for a body over MAX_BODY_BYTES, 429 when the server generates all it
takes at once (YANTRA_MAX_REQUESTS), 503 while not ready, 500 for a failure inside the model. A client that goes
mid-answer cancels its generation (http_wire: `Connection.watched`).

There is no admin surface here: generation, health and metrics are public on gRPC and the Prometheus port too, so
YANTRA_ADMIN_TOKEN guards nothing on this port (the `Authorization` header OpenAI clients always send is ignored).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from dataclasses import dataclass
from urllib.parse import unquote

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from services.server.engine import Engine
from services.server.grpc_api import AddressUnavailable, address_problem
from services.server.http_openai import (
    COMPLETION_MAX_TOKENS,
    DEFAULT_TEMPERATURE,
    ChatRequest,
    CompletionRequest,
    Reply,
    chat_prompt,
    parse_body,
    usage,
)
from services.server.http_wire import Connection, HttpError, Request, serve_connection
from services.server.requests import BadArgument, Ended, busy_problem, check_request, generate_text
from services.server.sampling import Sampling

log = logging.getLogger(__name__)

# A prompt of limits.MAX_GENERATE_PROMPT_CHARS (524,288) in JSON, or its token ids, fits with room to spare; as
# gRPC's default limit on a received message.
MAX_BODY_BYTES = 4 * 1024 * 1024
RETRY_SOON = (("Retry-After", "1"),)


@dataclass(frozen=True)
class Job:
    """A checked generation request: what to generate and how to answer."""

    ids: list[int]
    max_new_tokens: int
    sampling: Sampling
    stop: list[str]
    ignore_eos: bool
    stream: bool
    include_usage: bool
    reply: Reply


class HttpApi:
    def __init__(self, engine: Engine, registry: CollectorRegistry | None = None, *, ready: bool = True):
        self.engine, self.registry = engine, registry
        self.ready = ready  # False while the server restores its swaps, and once it stops: answers 503
        self.created = int(time.time())
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.Task, Connection] = {}
        self.routes = {
            "/health": ("GET", self.health),
            "/metrics": ("GET", self.metrics),
            "/v1/models": ("GET", self.models),
            "/v1/completions": ("POST", self.completions),
            "/v1/chat/completions": ("POST", self.chat_completions),
        }

    # ------------------------------------------------------------------ routes

    async def handle(self, request: Request, conn: Connection) -> None:
        path = request.path.rstrip("/") or "/"
        method, answer = self.routes.get(path, (None, None))
        if path.startswith("/v1/models/"):
            method, answer = "GET", self.model
        if answer is None:
            raise HttpError(
                404, f"no endpoint {request.method} {request.path} here; see GET /v1/models", code="unknown_url"
            )
        if request.method != method:
            raise HttpError(
                405,
                f"{path} takes {method}, not {request.method}",
                code="method_not_allowed",
                headers=(("Allow", method),),
            )
        await answer(request, conn)

    def _check_ready(self) -> None:
        if not self.ready:
            raise HttpError(
                503, "the server is not ready (starting, or stopping); retry shortly", type="server_error",
                code="not_ready", headers=RETRY_SOON,
            )  # fmt: skip

    async def health(self, request: Request, conn: Connection) -> None:
        self._check_ready()
        e = self.engine
        status = {"status": "ok", "model": e.loaded.name, "device": e.loaded.device, "dtype": e.dtype,
                  "active_requests": e.active, "max_requests": e.max_active}  # fmt: skip
        await conn.respond(200, json.dumps(status).encode())

    async def metrics(self, request: Request, conn: Connection) -> None:
        if self.registry is None:
            raise HttpError(404, "this server keeps no metrics registry", code="unknown_url")
        await conn.respond(200, generate_latest(self.registry), CONTENT_TYPE_LATEST)

    def _card(self) -> dict:
        loaded = self.engine.loaded
        return {"id": loaded.name, "object": "model", "created": self.created, "owned_by": "gpuyantra",
                "max_model_len": loaded.max_positions}  # fmt: skip

    async def models(self, request: Request, conn: Connection) -> None:
        await conn.respond(200, json.dumps({"object": "list", "data": [self._card()]}).encode())

    async def model(self, request: Request, conn: Connection) -> None:
        self._known_model(unquote(request.path.rstrip("/").removeprefix("/v1/models/")))  # a hub id has a "/"
        await conn.respond(200, json.dumps(self._card()).encode())

    def _known_model(self, name: str | None) -> None:
        served = self.engine.loaded.name
        if name and name != served:
            raise HttpError(
                404, f"the model {name!r} is not served here; this server serves {served!r}", param="model",
                code="model_not_found",
            )  # fmt: skip

    async def completions(self, request: Request, conn: Connection) -> None:
        await self._generate(conn, CompletionRequest)

    async def chat_completions(self, request: Request, conn: Connection) -> None:
        await self._generate(conn, ChatRequest)

    # ------------------------------------------------------------------ generation

    async def _generate(self, conn: Connection, body_type: type[CompletionRequest] | type[ChatRequest]) -> None:
        try:
            raw = await conn.read_body(MAX_BODY_BYTES)
            self._check_ready()
            job = self._job(parse_body(body_type, raw))
            busy = busy_problem(self.engine)
            if busy:
                raise HttpError(429, busy, type="rate_limit_error", code="rate_limit_exceeded", headers=RETRY_SOON)
        except HttpError as exc:  # refused before the engine took it: counted as gRPC's refusals are
            if exc.status != 503:
                self.engine.stats.finished("overloaded" if exc.status == 429 else "bad_request")
            raise
        # No await from the busy check until the engine counts the request (the first step of generate_text).
        if job.stream:
            await self._stream(conn, job)
        else:
            await self._whole(conn, job)

    def _job(self, body: CompletionRequest | ChatRequest) -> Job:
        self._known_model(body.model)
        chat = isinstance(body, ChatRequest)
        tokens_param = "max_completion_tokens" if chat and body.max_completion_tokens is not None else "max_tokens"
        max_tokens = body.max_completion_tokens if tokens_param == "max_completion_tokens" else body.max_tokens
        temperature = DEFAULT_TEMPERATURE if body.temperature is None else body.temperature
        sampling = Sampling(temperature, 1.0 if body.top_p is None else body.top_p, body.seed)
        try:
            body.check_supported()
            if chat:
                text, encode = chat_prompt(self.engine.tokenizer, body.turns())
                token_ids: list[int] = []
            else:
                (text, token_ids), encode = body.prompt_input(), None
                max_tokens = COMPLETION_MAX_TOKENS if max_tokens is None else max_tokens
            checked = check_request(
                self.engine, prompt=text, token_ids=token_ids, max_new_tokens=max_tokens, sampling=sampling,
                stop=body.stops(), tokens_param=tokens_param, encode=encode,
            )  # fmt: skip
        except BadArgument as exc:
            param = "messages" if chat and exc.param == "prompt" else exc.param
            raise HttpError(400, str(exc), param=param) from None
        reply = Reply(chat, ("chatcmpl-" if chat else "cmpl-") + secrets.token_hex(12), int(time.time()),
                      self.engine.loaded.name)  # fmt: skip
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return Job(checked.ids, checked.max_new_tokens, sampling, body.stops(), bool(body.ignore_eos),
                   bool(body.stream), include_usage, reply)  # fmt: skip

    def _pieces(self, job: Job):
        return generate_text(self.engine, job.ids, job.max_new_tokens, sampling=job.sampling, stop=job.stop,
                             ignore_eos=job.ignore_eos)  # fmt: skip

    async def _whole(self, conn: Connection, job: Job) -> None:
        parts: list[str] = []
        ended: Ended | None = None
        async with conn.watched():
            try:
                async with contextlib.aclosing(self._pieces(job)) as pieces:
                    async for piece in pieces:
                        parts.append(piece.text)
                        if isinstance(piece, Ended):
                            ended = piece
            except Exception as exc:
                log.exception("generation failed")
                raise HttpError(500, f"generation failed: {type(exc).__name__}: {exc}", type="server_error") from None
        assert ended is not None  # generate_text ends with one, or raises
        answer = job.reply.whole("".join(parts), ended.finish_reason, usage(len(job.ids), ended.tokens))
        await conn.respond(200, json.dumps(answer).encode())

    async def _stream(self, conn: Connection, job: Job) -> None:
        reply = job.reply
        conn.start_events()  # written, not awaited: the engine takes the request first
        async with conn.watched():
            first = True
            try:
                async with contextlib.aclosing(self._pieces(job)) as pieces:
                    async for piece in pieces:
                        if first and reply.chat:
                            await conn.event(reply.chunk("", role=True))
                        first = False
                        if isinstance(piece, Ended):
                            await conn.event(reply.chunk(piece.text, piece.finish_reason))
                            if job.include_usage:
                                await conn.event(reply.usage_chunk(usage(len(job.ids), piece.tokens)))
                        elif piece.text:
                            await conn.event(reply.chunk(piece.text))
            except ConnectionError:
                raise
            except Exception as exc:  # the head is sent: the failure goes as an error event
                log.exception("generation failed")
                error = HttpError(500, f"generation failed: {type(exc).__name__}: {exc}", type="server_error")
                await conn.event(error.body().decode())
            await conn.end_events()

    # ------------------------------------------------------------------ the server

    async def listen(self, addr: str) -> int:
        """Listen on "host:port" (port 0: any free one), exclusively; returns the port. AddressUnavailable, saying
        why, when it cannot."""
        host, _, port = addr.rpartition(":")
        try:
            self._server = await asyncio.start_server(self._connected, host.strip("[]") or None, int(port))
        except (OSError, ValueError) as exc:
            problem = address_problem(addr, "YANTRA_HTTP_ADDR")
            raise AddressUnavailable(problem or f"cannot listen on {addr}: {exc}") from exc
        return self._server.sockets[0].getsockname()[1]

    async def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        conn = self._connections[task] = Connection(reader, writer)
        try:
            await serve_connection(conn, self.handle)
        except asyncio.CancelledError:
            pass  # closed by `close`; ending quietly (asyncio 3.11 logs a cancelled connection task as an error)
        finally:
            del self._connections[task]

    async def close(self, grace_s: float) -> None:
        """Stop listening, close idle connections, give requests being answered `grace_s`, then cancel them."""
        self.ready = False
        if self._server is not None:
            self._server.close()
        for task, conn in list(self._connections.items()):
            if not conn.busy:
                task.cancel()
        busy = set(self._connections)
        if busy:
            await asyncio.wait(busy, timeout=grace_s)
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*busy, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()


async def start_http(
    engine: Engine, addr: str, registry: CollectorRegistry | None = None, *, ready: bool = True
) -> tuple[HttpApi, int]:
    """The HTTP API serving `engine` on `addr` ("host:port", port 0 picks one); returns it and its port."""
    api = HttpApi(engine, registry, ready=ready)
    return api, await api.listen(addr)
