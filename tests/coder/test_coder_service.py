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

        # one search step of two proposals, answered together; the test plays the judge
        proposals = await wait_for_events(bus, run_id, "CandidateProposed", 2, timeout=15.0)
        assert [(p.env.producer, p.msg.attempt, p.env.answers) for p in proposals] == [("coder", 1, 2), ("coder", 2, 2)]
        for proposal, reward in zip(proposals, [1, -1], strict=True):
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


class _CutAfter:
    """The real bus, but the connection is lost after `n` publishes (a coder killed mid-answer leaves the same log)."""

    def __init__(self, bus, n: int):
        self.bus, self.left = bus, n

    def __getattr__(self, name):
        return getattr(self.bus, name)

    async def publish(self, env):
        if self.left == 0:
            raise ConnectionError("lost the connection between two answers")
        self.left -= 1
        return await self.bus.publish(env)


async def test_a_coder_stopped_between_two_answers_of_one_trigger_owes_only_the_rest(bus, run_id):
    """A search step is two proposals for one trigger. Stopped after the first, the trigger is not answered:
    its redelivery publishes the second at its ordinal, never the first again, and the log replays exactly."""
    from services.core.runner import answer

    policy = pb.SwapPolicy(min_reward=1, name="cpu-untimed", reason="test")
    request = await publish_envelope(bus, run_id, pb.RunRequested(model="tiny-qwen2", max_candidates=3, policy=policy))
    captured = profile_captured()
    profile = await publish_envelope(bus, run_id, captured, request, producer="profiler")
    skills = await publish_envelope(
        bus, run_id, pb.SkillsRetrieved(target_class=captured.target_class), profile, "skillstore"
    )
    trigger = ev.first(await bus.read_run(run_id), "SkillsRetrieved")
    coder = CoderService()
    try:
        await answer(_CutAfter(bus, 1), coder, trigger)
        raise AssertionError("the cut connection did not stop the coder")
    except ConnectionError:
        pass
    log = await bus.read_run(run_id)
    [first] = [r for r in log if r.type == "CandidateProposed"]
    assert (first.msg.attempt, first.env.answers) == (1, 2)

    assert await answer(bus, coder, trigger) == 1  # the redelivery: only what is owed
    assert await answer(bus, coder, trigger) == 0  # now answered
    log = await bus.read_run(run_id)
    proposals = [r for r in log if r.type == "CandidateProposed"]
    assert [p.msg.attempt for p in proposals] == [1, 2] and proposals[0].env.event_id == first.env.event_id
    assert [p.env.event_id for p in proposals] == [
        ev.derived_event_id(run_id, skills.event_id, "CandidateProposed", k) for k in (0, 1)
    ]
    problems = [m for m in verify(log, domain.REDERIVE) if m.type in domain.REDERIVE]
    assert problems == [], [str(p) for p in problems]
