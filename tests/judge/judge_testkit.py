"""Helpers for the judge's tests: a ProfileCaptured built by hand from a real Qwen2RMSNorm instance.

(Imported by name: pytest puts this directory on sys.path for the tests in it.)
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import torch
from transformers.models.qwen2.modeling_qwen2 import Qwen2RMSNorm

from services.core import events as ev
from services.core.events import Recorded
from services.core.kernels import candidate_sha256
from services.core.pb import events_pb2 as pb
from services.ops.row_reduction import template as rmsnorm
from services.ops.row_reduction.contract import derive_contract
from services.server.introspection import introspect_module as introspect  # what the server records

WIDTH = 64
LIVE_SHAPE = (2, 3, WIDTH)


def profile_captured(module: torch.nn.Module, input_shape=LIVE_SHAPE, dtype="torch.float32") -> pb.ProfileCaptured:
    intro = introspect(module)
    observed = pb.ProfileObservation(
        model="tiny-qwen2",
        dtype=dtype,
        hardware=pb.HardwareFigures(device="cpu"),
        modules=[
            pb.ModuleClassProfile(introspection=intro, instances=3, calls=30, input_shape=input_shape, dtype=dtype)
        ],
    )
    fingerprint = pb.Fingerprint(op_family="row_reduction", row_width=input_shape[-1])
    ranked = pb.RankedTarget(class_path=intro.class_path, supported=True, fingerprint=fingerprint)
    return pb.ProfileCaptured(observed=observed, ranking=[ranked], target_class=intro.class_path)


def qwen_norm(width: int = WIDTH, eps: float = 1e-6, dtype=torch.float32) -> Qwen2RMSNorm:
    return Qwen2RMSNorm(width, eps=eps).to(dtype)


def honest_plan() -> pb.LaunchPlan:
    return rmsnorm.plan(rmsnorm.search_configs()[0])


def proposal(
    source: str, captured: pb.ProfileCaptured, attempt: int = 1, plan: pb.LaunchPlan | None = None
) -> pb.CandidateProposed:
    """The coder's proposal of `source` launched by `plan` (the template's first plan by default)."""
    intro = captured.observed.modules[0].introspection
    plan = honest_plan() if plan is None else plan
    digest = candidate_sha256(source, plan)
    return pb.CandidateProposed(
        candidate_id=f"c{attempt}-{digest[:10]}",
        target_class=intro.class_path,
        source=source,
        source_sha256=digest,
        plan=plan,
        contract=derive_contract(intro),
        config=rmsnorm.search_configs()[0],
        origin="template",
        attempt=attempt,
    )


def log_of(*msgs) -> list[Recorded]:
    """A run log of `msgs`, each caused by the one before (as the services would have emitted them)."""
    out: list[Recorded] = []
    cause = ""
    for seq, msg in enumerate(msgs, start=1):
        env = ev.make_envelope("judgetest", msg, producer="test", time_ns=time.time_ns(), causation_id=cause)
        out.append(Recorded(seq, env))
        cause = env.event_id
    return out


def honest_source() -> str:
    return rmsnorm.render(rmsnorm.search_configs()[0])


def prepared(
    source: str,
    *,
    plan: pb.LaunchPlan | None = None,
    width: int = WIDTH,
    dtype: str = "torch.bfloat16",
    examples: int = 4,
    device: str = "cpu",
    live_shape: tuple[int, ...] | None = None,
):
    """What the judge prepares before a child runs `source` against a live Qwen2RMSNorm of `width`: the job,
    the cases drawn fresh and their references (services.judge.service.Prepared)."""
    from services.judge.domain import live_target
    from services.judge.service import JudgeService

    captured = profile_captured(qwen_norm(width, dtype=getattr(torch, dtype.removeprefix("torch."))), dtype=dtype)
    captured.observed.modules[0].input_shape[:] = list(live_shape or (*LIVE_SHAPE[:-1], width))
    prior = log_of(captured)
    target = live_target(prior, captured.target_class)
    return JudgeService(device=device, examples=examples).prepare(proposal(source, captured, plan=plan), target)


async def run_prepared(ready, limits, scratch, *, use_gpu: bool = False, while_waiting=None):
    """Run the prepared job in a sandbox child; (outcome, the parent's tally of its outputs). `while_waiting()`
    is called while the child waits for its go-ahead (alive, its walls up)."""
    from services.judge import verdict
    from services.judge.sandbox import run_job

    async def go_ahead(outputs: bytes, facts: dict) -> bool:
        if while_waiting is not None:
            while_waiting()
        return not verdict.judge_outputs(ready.cases, ready.refs, facts, outputs, first_pass=True).error

    outcome = await run_job(
        ready.job, limits, use_gpu=use_gpu, cases=ready.blob, scratch_parent=scratch, go_ahead=go_ahead
    )
    return outcome, verdict.judge_outputs(ready.cases, ready.refs, outcome.facts, outcome.outputs)


@contextlib.asynccontextmanager
async def serving(nats_url: str, services: list, run_id: str):
    """Run each service on its own connection (as its own process would), consuming only this run's events.

    Connections are closed rather than drained: services.core.bus.consume leaves its pull
    subscription open, and a drain then waits out its 30 s timeout.
    """
    from services.core.bus import Bus  # imported here: the GPU box runs the sandbox tests without nats-py
    from services.core.runner import answer

    stop = asyncio.Event()
    buses, tasks = [], []
    for service in services:
        bus = await Bus.connect(nats_url, name=f"{service.name}-{run_id}")

        async def on_message(rec: Recorded, bus=bus, service=service) -> None:
            await answer(bus, service, rec)

        subjects = [ev.run_filter(run_id, t) for t in service.consumes]
        durable = f"{service.name}-{run_id}"
        tasks.append(asyncio.create_task(bus.consume(durable, subjects, on_message, stop, ack_wait=5)))
        buses.append(bus)
    try:
        yield
    finally:
        stop.set()
        for task in tasks:
            await task
        for bus in buses:
            await bus.nc.close()


def print_verdict(label: str, judged: pb.CandidateJudged) -> None:
    """The verdict and each timed row, for a GPU test run with -s (what the H200 measured, in the log)."""
    print(f"\n{label}: reward {judged.reward:+d}: {judged.reason}")
    for row in judged.observed.timing.rows:
        print(
            f"  {row.shape}: candidate {row.candidate_us:.2f} us (host {row.candidate_host_us:.1f}), eager "
            f"{row.eager_us:.2f} (host {row.eager_host_us:.1f}), compile {row.compile_us:.2f}; "
            f"{row.floor_us / row.candidate_us:.0%} of copy"
        )
