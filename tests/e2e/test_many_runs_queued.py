"""Runs queued on one stack all at once: each ends with exactly one terminal event, none is lost, no event is stored
twice and every trigger is answered as often as its handler answers. The five services run as processes on the tiny
CPU model; the profiler takes one run at a time (its durable hands out one message at a time), so the later runs
wait in the stream behind the earlier ones. bench/load_runs.py does the same with 100 runs through `yantra optimize`
and records the figures (bench/results/load_100_runs_cpu.json)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter

import pytest
from e2e_stack import request, services_alive

from services.core import events as ev
from services.core.pb import events_pb2 as pb
from services.core.server_client import wait_ready
from services.registry import SERVICES

pytestmark = pytest.mark.e2e
RUNS = 10
WAIT_S = 420
# Nothing lands in the log for this long while runs wait: a service is stuck (a tiny run's longest step, a cold
# judge on a busy CPU, takes under a minute).
STALL_S = 120
# No verdict on a CPU reaches +3 (rewards there are capped at +1): nothing is swapped, so every run meets the same
# eager model and none waits on a kernel another run swapped into the Triton interpreter.
NEVER_SWAPS = pb.SwapPolicy(min_reward=3, name="explicit", reason="test: queue many runs, swap none")


async def test_runs_queued_at_once_each_end_once_and_none_is_lost(stack, own_bus):
    await wait_ready(
        stack.settings.server_addr, timeout=120, still_starting=lambda: stack.procs["server"].poll() is None
    )
    batch = uuid.uuid4().hex[:6]
    runs = [f"q{batch}-{i:02d}" for i in range(RUNS)]
    await asyncio.gather(
        *(
            request(
                own_bus, run, policy=NEVER_SWAPS, max_candidates=1, prompts=["hi"], decode_tokens=1, served_streams=[1]
            )  # fmt: skip
            for run in runs
        )
    )

    alive = services_alive(stack)
    deadline = time.monotonic() + WAIT_S
    ended: set[str] = set()
    last_seq, moved = -1, time.monotonic()
    while time.monotonic() < deadline and ended != set(runs):
        alive()
        seq = (await own_bus.js.stream_info(ev.RUNS_STREAM)).state.last_seq
        if seq != last_seq:
            last_seq, moved = seq, time.monotonic()
        elif time.monotonic() - moved > STALL_S:  # a service alive but stuck: say which, now
            break
        ends = [r for kind in ev.TERMINAL_EVENTS for r in await own_bus.read_all(ev.run_filter("*", kind))]
        ended = {r.env.run_id for r in ends} & set(runs)
        await asyncio.sleep(1.0)
    await asyncio.sleep(3.0)  # a second terminal event of a run would land about now

    log = [r for r in await own_bus.read_all() if r.env.run_id in runs]  # (a NATS wildcard is a whole token)
    by_run = {run: [r for r in log if r.env.run_id == run] for run in runs}
    lost = {run: [r.type for r in events][-3:] for run, events in by_run.items() if not run_ends(events)}
    assert not lost, f"{len(lost)} of {RUNS} runs have no terminal event: {lost}; " + await stuck(own_bus)
    ends = {run: run_ends(events) for run, events in by_run.items()}
    assert all(len(e) == 1 for e in ends.values()), {run: [r.type for r in e] for run, e in ends.items()}
    # a tiny run completes; a RunFailed would be a terminal event too, but says something broke under the queue
    assert Counter(e[0].type for e in ends.values()) == {"RunCompleted": RUNS}, [e[0].msg for e in ends.values()]
    assert all(e[0].msg.outcome == "no_swap" for e in ends.values())

    ids = Counter(r.env.event_id for r in log)
    assert [i for i, n in ids.items() if n > 1] == []  # no event stored twice
    answers = Counter((r.env.causation_id, r.env.producer) for r in log if r.env.causation_id)
    owed = {(r.env.causation_id, r.env.producer): r.env.answers or 1 for r in log if r.env.causation_id}
    assert answers == owed
    assert await own_bus.dead_letter_count() == 0


async def stuck(bus) -> str:
    """Each service's durable: what it has not been handed yet, and what it holds unacknowledged."""
    counts = []
    for name in SERVICES:
        info = await bus.js.consumer_info(ev.RUNS_STREAM, name)
        counts.append(f"{name} {info.num_pending} pending, {info.num_ack_pending} in progress")
    return "; ".join(counts)


def run_ends(events: list[ev.Recorded]) -> list[ev.Recorded]:
    return [r for r in events if r.type in ev.TERMINAL_EVENTS]
