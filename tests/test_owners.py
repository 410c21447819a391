"""Who writes which event (services.core.owners): every event of a run's log has an owner, each service's user may
publish its own facts and nothing of another's, and what a user outside the project's publishers gets."""

from __future__ import annotations

from services.core import events as ev
from services.core import owners
from services.registry import SERVICES


def test_every_run_event_has_an_owner_and_each_decided_fact_exactly_one():
    for type_name in ev.RUN_EVENT_NAMES:
        assert owners.owners(type_name), type_name
    # the facts a swap rests on are each one service's alone
    for fact, owner in {
        "CandidateJudged": "judge",
        "TargetConcluded": "coder",
        "SwapCommitted": "server",
        "RunRequested": "cli",
        "SkillPublished": "skillstore",
        "ProfileCaptured": "profiler",
    }.items():
        assert owners.owners(fact) == (owner,), fact
    assert set(owners.owners("RunFailed")) == {*SERVICES, "cli"}  # a step nobody can answer ends its run


def test_a_services_user_may_publish_its_own_subjects_the_dead_letters_and_the_api_and_no_other_fact():
    judge = owners.publish_allowed("judge")
    assert "yantra.run.*.CandidateJudged" in judge and "yantra.run.*.RunFailed" in judge
    assert not any("SwapCommitted" in s or "RunRequested" in s or "CandidateProposed" in s for s in judge)
    assert ev.DLQ_SUBJECTS in judge and "$JS.API.>" in judge and "yantra.metrics.judge" not in judge
    assert ev.metrics_subject("server") in owners.publish_allowed("server")
    assert owners.publish_allowed("ops") is None  # an operator's own user: no restriction written
    assert "$JS.API.STREAM.DELETE.>" in owners.JS_API_DENIED
