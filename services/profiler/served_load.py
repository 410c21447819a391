"""The profiler's second edge: a client of the live server's Inference.Generate, measuring the load users are served
at (the served lane: admission, the batcher, graphs, the token stream), level by level, repeated until each figure's
interval is measured (services.profiler.served_stats decides when; this file only sends and times).

Prompts are seeded token ids drawn from 32..255, ids every vocabulary holds (byte tokens in a BPE vocabulary; the
presets' byte-level tokenizer has 512), so no vocabulary need be asked; the same seed, level and repeat send the
same requests before and after a run's swaps. Every request asks ignore_eos, so it produces exactly its tokens.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time

import grpc

from services.core.pb import events_pb2 as pb
from services.core.pb import inference_pb2 as ipb
from services.core.pb import inference_pb2_grpc as igrpc
from services.core.server_client import ServerUnavailable, graphs_captured
from services.profiler import served_stats
from services.profiler.served_stats import Timed

log = logging.getLogger(__name__)

ID_LOW, ID_HIGH = 32, 256
# One request's deadline: a 128-token request at 64 streams takes a few seconds on a GPU, a CPU's tiny one less.
REQUEST_TIMEOUT_S = 120.0
# How long a measure waits for the server's stale graphs (a swap's, a revert's) to be captured before its levels:
# the idle engine captures one at a time, each ~0.1-0.7 s on the H200, 55 for the 1.5B shape. Measured while they
# are captured, a burst waits behind a capture: on the H200 a run's 'after', taken at once, read TTFT p99 at 64
# streams 1.9x its 'before' (whose graphs were all captured at load) and rolled four swaps back on it.
GRAPHS_WAIT_S = 120.0
GRAPHS_POLL_S = 0.25


def prompt_ids(plan: pb.ServedLoadPlan, key: str) -> list[int]:
    rng = random.Random(f"{plan.seed}:{key}")  # a str seed hashes the same in every process
    return [rng.randrange(ID_LOW, ID_HIGH) for _ in range(plan.input_tokens)]


async def send(stub: igrpc.InferenceStub, ids: list[int], tokens: int, timeout_s: float) -> Timed:
    """One streamed Generate, timed chunk by chunk; a failure is recorded on the request, never raised."""
    r = Timed(sent=time.perf_counter(), asked_tokens=tokens)
    request = ipb.GenerateRequest(token_ids=ids, max_new_tokens=tokens, ignore_eos=True)
    try:
        async for chunk in stub.Generate(request, timeout=timeout_s):
            if chunk.token_ids:
                r.chunk_times.append(time.perf_counter())
                r.output_tokens += len(chunk.token_ids)
        r.ended = time.perf_counter()
    except grpc.aio.AioRpcError as exc:
        r.error = exc.code().name
    return r


class ServedLoadClient:
    """Measures a ServedLoadPlan against the server at `addr` (Generate needs no admin token: it is what users call)."""

    def __init__(self, addr: str, request_timeout_s: float = REQUEST_TIMEOUT_S, graphs_wait_s: float = GRAPHS_WAIT_S):
        self.addr = addr
        self.request_timeout_s = request_timeout_s
        self.graphs_wait_s = graphs_wait_s

    async def measure(self, plan: pb.ServedLoadPlan, device: str) -> pb.ServedLoadObservation:
        out = pb.ServedLoadObservation(plan=plan, device=device)
        try:
            out.graphs_stale, out.graphs_wait_s = await graphs_captured(self.addr, self.graphs_wait_s, GRAPHS_POLL_S)
        except ServerUnavailable as exc:  # the levels then record what Generate answers
            log.warning("no Health before measuring (%s)", exc)
        if out.graphs_stale:
            log.warning("measuring with %d graphs still stale after %.0f s", out.graphs_stale, out.graphs_wait_s)
        for streams in plan.streams:
            out.levels.append(await self._level(plan, streams))
        return out

    async def _level(self, plan: pb.ServedLoadPlan, streams: int) -> pb.ServedLevel:
        level = pb.ServedLevel(streams=streams)
        channels = [grpc.aio.insecure_channel(self.addr) for _ in range(streams)]  # one a stream, as users connect
        try:
            stubs = [igrpc.InferenceStub(c) for c in channels]
            # Not counted: the first burst of a level meets graphs and caches of its width for the first time.
            await self._round(plan, stubs, f"{streams}:warm-up", 1)
            while not served_stats.level_done(level, plan):
                key = f"{streams}:{len(level.repeats)}"
                requests, wall = await self._round(plan, stubs, key, plan.requests_per_stream)
                level.repeats.append(served_stats.repeat_figures(requests, wall))
            log.info("served load at %d streams: %d repeats", streams, len(level.repeats))
        finally:
            for c in channels:
                await c.close()
        return level

    async def _round(self, plan: pb.ServedLoadPlan, stubs, key: str, per_stream: int) -> tuple[list[Timed], float]:
        """Each stream sends `per_stream` requests one after another (a closed loop); returns them and the wall."""

        async def stream(i: int, stub) -> list[Timed]:
            return [
                await send(stub, prompt_ids(plan, f"{key}:{i}:{j}"), plan.output_tokens, self.request_timeout_s)
                for j in range(per_stream)
            ]

        start = time.perf_counter()
        done = await asyncio.gather(*(stream(i, s) for i, s in enumerate(stubs)))
        return [r for rs in done for r in rs], time.perf_counter() - start
