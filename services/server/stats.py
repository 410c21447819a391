"""Counters of served traffic, kept by the engine and read by the metrics loop and Health; and the gRPC
interceptor that counts the Generate requests refused before the engine sees them."""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass

import grpc

from services.core.pb import inference_pb2 as ipb
from services.server.latency_parts import LatencyParts

MAX_SAMPLES = 20_000
GENERATE = f"/{ipb.DESCRIPTOR.services_by_name['Inference'].full_name}/Generate"
# How a Generate the server answers before the engine takes it ends: its arguments are wrong (or its body does
# not decode), or the server already generates all it takes at once. Other statuses come from the engine's own
# work, which the engine counts (services/server/engine.py: Engine.generate).
REFUSALS = {grpc.StatusCode.INVALID_ARGUMENT: "bad_request", grpc.StatusCode.RESOURCE_EXHAUSTED: "overloaded"}


@dataclass(frozen=True)
class Window:
    tokens: int
    latencies_s: list[float]


class RequestStats:
    """What the engine reports of its traffic; `observers` (the Prometheus exporter) hear each event too."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.observers: list = []  # objects with generated, first_token, next_token, finished, swap_held, latency
        self.parts = LatencyParts(clock)  # where served time went (services/server/latency_parts.py)
        self.requests_served = 0
        self._tokens: deque[tuple[float, int]] = deque(maxlen=MAX_SAMPLES)
        self._requests: deque[tuple[float, float]] = deque(maxlen=MAX_SAMPLES)
        self._lock = threading.Lock()

    def tokens(self, n: int) -> None:
        """`n` tokens generated (one chunk of a request)."""
        with self._lock:
            self._tokens.append((self.clock(), n))
        for observer in self.observers:
            observer.generated(n)

    def request_done(self, latency_s: float) -> None:
        with self._lock:
            self.requests_served += 1
            self._requests.append((self.clock(), latency_s))

    def first_token(self, seconds: float) -> None:
        """The time from a request's arrival to its first token."""
        for observer in self.observers:
            observer.first_token(seconds)

    def next_token(self, seconds: float) -> None:
        """The time between two tokens of one request."""
        for observer in self.observers:
            observer.next_token(seconds)

    def finished(self, outcome: str) -> None:
        """How a request ended: ok | bad_request | overloaded | cancelled | error."""
        for observer in self.observers:
            observer.finished(outcome)

    def latency(self, part: str, seconds: float) -> None:
        """One part of served latency (latency_parts.PARTS): a first token's queue, prefill or hand-off, a tick's
        hand-off or length."""
        self.parts.add(part, seconds)
        for observer in self.observers:
            observer.latency(part, seconds)

    def swap_held(self, seconds: float) -> None:
        """How long a swap attempt held the model."""
        for observer in self.observers:
            observer.swap_held(seconds)

    def window(self, seconds: float) -> Window:
        """Tokens produced and latencies of requests finished in the last `seconds`."""
        since = self.clock() - seconds
        with self._lock:
            tokens = sum(n for t, n in self._tokens if t >= since)
            latencies = [lat for t, lat in self._requests if t >= since]
        return Window(tokens, latencies)


class CountRefused(grpc.aio.ServerInterceptor):
    """Tells `stats` how each Generate the server refuses ends (REFUSALS): those are answered by gRPC before
    the engine sees them (arguments checked in grpc_api.request_ids, a full server, a body that does not
    decode), so the engine, which counts every request it takes, never hears of them.

    It goes before UndecodableRequest in the server's interceptors, so the bodies that one refuses are counted.
    """

    def __init__(self, stats: RequestStats):
        self.stats = stats

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None or handler_call_details.method != GENERATE or not handler.unary_stream:
            return handler
        behaviour, stats = handler.unary_stream, self.stats

        async def counted(request, context):
            try:
                async for reply in behaviour(request, context):
                    yield reply
            except BaseException:  # context.abort raises; its status is set by then
                outcome = REFUSALS.get(context.code())
                if outcome is not None:
                    stats.finished(outcome)
                raise

        return grpc.unary_stream_rpc_method_handler(counted, handler.request_deserializer, handler.response_serializer)
