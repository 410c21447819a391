"""Helpers for the coder's tests: run logs built by hand around a real Qwen2RMSNorm's introspection.

(Imported by name: pytest puts this directory on sys.path for the tests in it.)
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import torch
from transformers.models.qwen2.modeling_qwen2 import Qwen2RMSNorm

from services.core import events as ev
from services.core import owners
from services.core.bus import Bus
from services.core.events import Recorded
from services.core.pb import events_pb2 as pb
from services.core.runner import answer
from services.server.introspection import introspect_module as introspect  # what the server records

RUN = "codertest"


def profile_captured(module: torch.nn.Module | None = None, op_family: str = "row_reduction") -> pb.ProfileCaptured:
    intro = introspect(module if module is not None else Qwen2RMSNorm(64, eps=1e-6))
    observed = pb.ProfileObservation(
        model="tiny-qwen2",
        dtype="torch.float32",
        modules=[pb.ModuleClassProfile(introspection=intro, input_shape=[1, 5, 64], dtype="torch.float32")],
    )
    ranked = pb.RankedTarget(class_path=intro.class_path, fingerprint=pb.Fingerprint(op_family=op_family))
    return pb.ProfileCaptured(observed=observed, ranking=[ranked], target_class=intro.class_path)


class Log:
    """A run log being written by hand: each append is caused by the event named (default: the last)."""

    def __init__(self) -> None:
        self.records: list[Recorded] = []

    def append(self, msg, cause: Recorded | None = None, ordinal: int = 0) -> Recorded:
        causation = cause.env.event_id if cause else (self.records[-1].env.event_id if self.records else "")
        producer = owners.owners(ev.type_name(msg))[0]  # as its owner writes it (services.core.owners)
        env = ev.make_envelope(
            RUN, msg, producer=producer, time_ns=time.time_ns(), causation_id=causation, ordinal=ordinal
        )
        rec = Recorded(len(self.records) + 1, env)
        self.records.append(rec)
        return rec


@contextlib.asynccontextmanager
async def serving(nats_url: str, service, run_id: str):
    """Run `service` on its own connection (as its own process would), consuming only this run's events.

    The connection is closed rather than drained: services.core.bus.consume leaves its pull
    subscription open, and a drain then waits out its 30 s timeout.
    """
    bus = await Bus.connect(nats_url, name=f"{service.name}-{run_id}")
    stop = asyncio.Event()

    async def on_message(rec: Recorded) -> None:
        await answer(bus, service, rec)

    subjects = [ev.run_filter(run_id, t) for t in service.consumes]
    task = asyncio.create_task(bus.consume(f"{service.name}-{run_id}", subjects, on_message, stop, ack_wait=5))
    try:
        yield
    finally:
        stop.set()
        await task
        await bus.nc.close()
