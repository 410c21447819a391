"""The coder service answering over a real nats-server; its events replay byte for byte."""

from __future__ import annotations

import asyncio
import time

from coder_testkit import profile_captured, serving

from services.coder import domain
from services.coder.service import CoderService
from services.core import events as ev
from services.core.pb import events_pb2 as pb
from services.core.replay import verify


async def _publish(bus, run_id, msg, cause: ev.Envelope | None = None, producer="test") -> ev.Envelope:
    causation = cause.event_id if cause else ""
    env = ev.make_envelope(run_id, msg, producer=producer, time_ns=time.time_ns(), causation_id=causation)
    await bus.publish(env)
    return env


async def _wait_for(bus, run_id, type_name: str, count: int, timeout: float = 15.0) -> list[ev.Recorded]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = ev.all_of(await bus.read_run(run_id), type_name)
        if len(found) >= count:
            return found
        await asyncio.sleep(0.1)
    raise AssertionError(f"no {count} x {type_name} in run {run_id} after {timeout} s")


async def test_coder_proposes_searches_and_concludes_over_nats(bus, nats_server, run_id):
    async with serving(nats_server.url, CoderService(), run_id):
        policy = pb.SwapPolicy(min_reward=1, name="cpu-untimed", reason="test")
        request = await _publish(bus, run_id, pb.RunRequested(model="tiny-qwen2", max_candidates=2, policy=policy))
        captured = profile_captured()
        profile = await _publish(bus, run_id, captured, request, producer="profiler")
        await _publish(bus, run_id, pb.SkillsRetrieved(target_class=captured.target_class), profile, "skillstore")

        for k, reward in enumerate([1, -1], start=1):  # the test plays the judge
            proposal = (await _wait_for(bus, run_id, "CandidateProposed", k))[-1]
            assert proposal.env.producer == "coder" and proposal.msg.attempt == k
            verdict = pb.CandidateJudged(
                candidate_id=proposal.msg.candidate_id, source_sha256=proposal.msg.source_sha256, reward=reward
            )
            await _publish(bus, run_id, verdict, proposal.env, producer="judge")

        [concluded] = await _wait_for(bus, run_id, "TargetConcluded", 1)
    log = await bus.read_run(run_id)
    first = ev.first(log, "CandidateProposed").msg
    assert concluded.msg.candidate_id == first.candidate_id and concluded.msg.swap
    assert [r.type for r in log].count("CandidateProposed") == 2
    problems = [m for m in verify(log, domain.REDERIVE) if m.type in domain.REDERIVE]
    assert problems == [], [str(p) for p in problems]
