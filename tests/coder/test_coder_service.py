"""The coder service answering over a real nats-server; its events replay byte for byte."""

from __future__ import annotations

from coder_testkit import profile_captured, serving
from runlog import publish_envelope, wait_for_events

from services.coder import domain
from services.coder.service import CoderService
from services.core import events as ev
from services.core.pb import events_pb2 as pb
from services.core.replay import verify


async def test_coder_proposes_searches_and_concludes_over_nats(bus, nats_server, run_id):
    async with serving(nats_server.url, CoderService(), run_id):
        policy = pb.SwapPolicy(min_reward=1, name="cpu-untimed", reason="test")
        request = await publish_envelope(
            bus, run_id, pb.RunRequested(model="tiny-qwen2", max_candidates=2, policy=policy)
        )
        captured = profile_captured()
        profile = await publish_envelope(bus, run_id, captured, request, producer="profiler")
        await publish_envelope(
            bus, run_id, pb.SkillsRetrieved(target_class=captured.target_class), profile, "skillstore"
        )

        for k, reward in enumerate([1, -1], start=1):  # the test plays the judge
            proposal = (await wait_for_events(bus, run_id, "CandidateProposed", k, timeout=15.0))[-1]
            assert proposal.env.producer == "coder" and proposal.msg.attempt == k
            verdict = pb.CandidateJudged(
                candidate_id=proposal.msg.candidate_id, source_sha256=proposal.msg.source_sha256, reward=reward
            )
            await publish_envelope(bus, run_id, verdict, proposal.env, producer="judge")

        [concluded] = await wait_for_events(bus, run_id, "TargetConcluded", 1, timeout=15.0)
    log = await bus.read_run(run_id)
    first = ev.first(log, "CandidateProposed").msg
    assert concluded.msg.candidate_id == first.candidate_id and concluded.msg.swap
    assert [r.type for r in log].count("CandidateProposed") == 2
    problems = [m for m in verify(log, domain.REDERIVE) if m.type in domain.REDERIVE]
    assert problems == [], [str(p) for p in problems]
