"""A small gRPC client for the inference server, used by the CLI (and the TUI later)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import grpc

from services.core.admin_auth import metadata
from services.core.pb import inference_pb2 as ipb
from services.core.pb import inference_pb2_grpc as igrpc


class ServerUnavailable(RuntimeError):
    pass


class WrongServer(ServerUnavailable):
    """Another server than the one expected answers on the address (its Health has another instance id)."""


async def health(addr: str, timeout: float = 2.0) -> ipb.HealthReply:
    async with grpc.aio.insecure_channel(addr) as channel:
        try:
            return await igrpc.AdminStub(channel).Health(ipb.HealthRequest(), timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            raise ServerUnavailable(f"inference server at {addr}: {exc.details() or exc.code().name}") from exc


async def wait_ready(
    addr: str, timeout: float, still_starting: Callable[[], bool] = lambda: True, instance_id: str = ""
) -> ipb.HealthReply:
    """Poll Health until the server is ready, it gives up starting, or `timeout` passes.

    With `instance_id`, a Health reply with another instance id raises WrongServer at once: some other
    server holds the address, not the one the caller started.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last = "no answer"
    while loop.time() < deadline:
        if not still_starting():
            raise ServerUnavailable(f"the inference server stopped while starting ({last})")
        try:
            reply = await health(addr, timeout=1.0)
        except ServerUnavailable as exc:
            last = str(exc)
        else:
            if instance_id and reply.instance_id != instance_id:
                raise WrongServer(
                    f"another server answers on {addr} (serving {reply.model or 'an unknown model'}), not the one "
                    "this command started; stop it, or set YANTRA_SERVER_ADDR to a free address"
                )
            if reply.ready:
                return reply
        await asyncio.sleep(0.5)
    raise ServerUnavailable(f"the inference server at {addr} was not ready after {timeout:.0f}s ({last})")


async def graphs_captured(addr: str, wait_s: float, poll_s: float = 0.25) -> tuple[int, float]:
    """Wait up to `wait_s` until the server's Health counts no stale graph (after a swap or a revert the idle engine
    captures them one at a time, and a load sent meanwhile waits behind a capture in its bursts); (graphs still
    stale, seconds waited). A Health that fails raises ServerUnavailable."""
    start = time.perf_counter()
    while (stale := (await health(addr, timeout=10.0)).graphs_stale) and time.perf_counter() - start < wait_s:
        await asyncio.sleep(poll_s)
    return stale, time.perf_counter() - start


async def generate(addr: str, prompt: str, max_new_tokens: int) -> AsyncIterator[ipb.GenerateChunk]:
    async with grpc.aio.insecure_channel(addr) as channel:
        stub = igrpc.InferenceStub(channel)
        try:
            async for chunk in stub.Generate(ipb.GenerateRequest(prompt=prompt, max_new_tokens=max_new_tokens)):
                yield chunk
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.UNAVAILABLE:
                raise ServerUnavailable(f"inference server at {addr} is unreachable: {exc.details()}") from exc
            raise ValueError(f"{exc.code().name}: {exc.details()}") from exc


async def generate_tokens(addr: str, prompt: str, max_new_tokens: int) -> tuple[list[int], str, float]:
    ids: list[int] = []
    text = []
    tps = 0.0
    async for chunk in generate(addr, prompt, max_new_tokens):
        ids += list(chunk.token_ids)
        text.append(chunk.text)
        if chunk.done:
            tps = chunk.tokens_per_s
    return ids, "".join(text), tps


async def list_swaps(addr: str, token: str = "", timeout: float = 2.0) -> list[ipb.SwapRecord]:
    """The swaps the live server holds, and in what state; ServerUnavailable when it does not answer."""
    async with grpc.aio.insecure_channel(addr) as channel:
        try:
            stub = igrpc.AdminStub(channel)
            reply = await stub.ListSwaps(ipb.ListSwapsRequest(), timeout=timeout, metadata=metadata(token))
        except grpc.aio.AioRpcError as exc:
            raise ServerUnavailable(f"inference server at {addr}: {exc.details() or exc.code().name}") from exc
    return list(reply.swaps)
