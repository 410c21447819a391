"""The profiler's one edge: the inference server's Admin RPCs over gRPC (grpc.aio)."""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

import grpc

from services.core.admin_auth import metadata
from services.core.pb import events_pb2 as pb
from services.core.pb import inference_pb2 as ipb
from services.core.pb import inference_pb2_grpc as igrpc

log = logging.getLogger(__name__)

T = TypeVar("T")

# The deadline of one CaptureProfile or MeasureDecode call, unless YANTRA_PROFILER_CALL_TIMEOUT_S says otherwise. A
# profile on a GPU includes calibration and a dozen passes over the run's prompts; a CPU model is slower still. A
# run's work is bounded (services.core.limits: at most 1,024 tokens a pass, ~26 s at the H200's batch-1 decode rate
# of the 1.5B shape), so ten minutes is ample for a profile and stops one that a loaded server could not finish.
CALL_TIMEOUT_S = 600.0
TIMEOUT_ENV = "YANTRA_PROFILER_CALL_TIMEOUT_S"
# Codes that mean "the server is not there (yet)": worth a retry. Anything else is an answer.
_RETRYABLE = (grpc.StatusCode.UNAVAILABLE,)


class ServerUnreachable(RuntimeError):
    """The inference server did not answer; the event is redelivered later."""


class AdminCallFailed(RuntimeError):
    """The inference server answered with an error."""

    def __init__(self, message: str, code: grpc.StatusCode):
        super().__init__(message)
        self.code = code

    @property
    def refused(self) -> bool:
        """The server refused the request itself (it cannot succeed on a retry): a run that asks it cannot finish."""
        return self.code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OUT_OF_RANGE)

    @property
    def timed_out(self) -> bool:
        """The call ran past its deadline (and the server stopped its work when it ended)."""
        return self.code == grpc.StatusCode.DEADLINE_EXCEEDED

    @property
    def ends_run(self) -> bool:
        """Whether the run must end now rather than the event be redelivered: a refusal cannot succeed on a retry,
        and a call past its deadline would be asked again, for as long again, up to every delivery."""
        return self.refused or self.timed_out


def timeout_from_env(env: Mapping[str, str]) -> float:
    """The call deadline in seconds from `env`'s YANTRA_PROFILER_CALL_TIMEOUT_S (unset or empty: CALL_TIMEOUT_S);
    ValueError naming the variable unless it is a positive finite number."""
    text = env.get(TIMEOUT_ENV, "").strip()
    if not text:
        return CALL_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{TIMEOUT_ENV}={text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{TIMEOUT_ENV}={text!r}: the deadline must be a positive number of seconds")
    return value


class AdminClient:
    """Calls Health, CaptureProfile and MeasureDecode, retrying a few times with backoff while the server is away."""

    def __init__(
        self,
        addr: str,
        *,
        token: str = "",
        attempts: int = 4,
        backoff_s: float = 0.5,
        timeout_s: float = CALL_TIMEOUT_S,
    ):
        self.addr = addr
        self.metadata = metadata(token)
        self.attempts = max(1, attempts)
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s
        self._channel: grpc.aio.Channel | None = None

    def _stub(self) -> igrpc.AdminStub:
        if self._channel is None:  # created lazily: a grpc.aio channel belongs to the running loop
            self._channel = grpc.aio.insecure_channel(self.addr)
        return igrpc.AdminStub(self._channel)

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    async def _call(self, rpc: str, call: Callable[[igrpc.AdminStub], Awaitable[T]]) -> T:
        delay = self.backoff_s
        for attempt in range(1, self.attempts + 1):
            try:
                return await call(self._stub())
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                    raise AdminCallFailed(
                        f"{rpc} on the inference server at {self.addr} ran past the profiler's deadline of "
                        f"{self.timeout_s:g} s ({TIMEOUT_ENV}), and the server stopped it: ask for fewer prompts or "
                        "decode tokens, or allow a longer deadline",
                        exc.code(),
                    ) from exc
                if exc.code() not in _RETRYABLE:
                    raise AdminCallFailed(
                        f"{rpc} on the inference server at {self.addr} failed: {exc.code().name}: {exc.details()}",
                        exc.code(),
                    ) from exc
                if attempt == self.attempts:
                    raise ServerUnreachable(
                        f"the inference server at {self.addr} did not answer {rpc} after {attempt} attempts "
                        f"({exc.details() or exc.code().name}); is it running? (YANTRA_SERVER_ADDR)"
                    ) from exc
                log.warning("%s: %s unavailable (attempt %d), retrying in %.1fs", rpc, self.addr, attempt, delay)
                await asyncio.sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")  # the loop returns or raises

    async def health(self) -> ipb.HealthReply:
        """The server's Health: its device decides the served-load plan (services.profiler.served_plan)."""
        return await self._call("Health", lambda s: s.Health(ipb.HealthRequest(), timeout=30.0, metadata=self.metadata))

    async def capture_profile(self, prompts: list[str], max_new_tokens: int, repeats: int = 1) -> pb.ProfileObservation:
        request = ipb.CaptureProfileRequest(prompts=prompts, max_new_tokens=max_new_tokens, repeats=repeats)
        reply = await self._call(
            "CaptureProfile", lambda s: s.CaptureProfile(request, timeout=self.timeout_s, metadata=self.metadata)
        )
        return reply.observation

    async def measure_decode(self, prompts: list[str], max_new_tokens: int, repeats: int) -> ipb.MeasureDecodeReply:
        request = ipb.MeasureDecodeRequest(prompts=prompts, max_new_tokens=max_new_tokens, repeats=repeats)
        return await self._call(
            "MeasureDecode", lambda s: s.MeasureDecode(request, timeout=self.timeout_s, metadata=self.metadata)
        )
