"""`replay --verify` flags any event that is not the one derivation of its trigger and ordinal."""

from __future__ import annotations

from runlog import RunLog, publish

from services.core import events as ev
from services.core.pb import events_pb2 as pb
from services.core.replay import verify
from services.core.run_end import REDERIVE, run_failed


def _failed_run() -> RunLog:
    run = RunLog("r1")
    asked = run.add(pb.RunRequested(prompts=[""]), "cli")
    observed = pb.RunFailureObservation(service="profiler", error="prompt 1 of 1 is empty")
    run.add(run_failed(run.log, asked, observed), "profiler", asked)
    return run


def test_a_clean_log_verifies():
    assert verify(_failed_run().log, REDERIVE) == []


def test_a_second_copy_of_an_event_is_flagged():
    run = _failed_run()
    for original in list(run.log):
        copy = ev.Recorded(len(run.log) + 1, original.env)  # the same envelope stored again
        problems = verify([*run.log, copy], REDERIVE)
        assert [(p.seq, p.type) for p in problems] == [(copy.seq, original.type)], problems
        assert f"a second copy of seq {original.seq}" in problems[0].problem


def test_an_answer_derived_with_another_ordinal_is_flagged():
    """A second, forged answer may carry an id the trigger could derive, but not at its place."""
    run = _failed_run()
    asked, failed = run.log
    forged = ev.make_envelope(
        "r1", failed.msg, producer="profiler", time_ns=0, causation_id=asked.env.event_id, ordinal=3
    )
    problems = verify([*run.log, ev.Recorded(3, forged)], REDERIVE)
    assert len(problems) == 1 and "at its place (ordinal 1 of its cause's answers)" in problems[0].problem


async def test_a_copy_published_without_its_message_id_is_stored_and_flagged(bus, run_id):
    """The stream drops a re-publish only by message id: a copy sent without it lands, and replay must say so."""
    asked = await publish(bus, run_id, pb.RunRequested(prompts=[""]), "cli")
    observed = pb.RunFailureObservation(service="profiler", error="prompt 1 of 1 is empty")
    failed = await publish(bus, run_id, run_failed([asked], asked, observed), "profiler", asked)
    await bus.publish(failed.env)  # with its id: dropped by the stream
    assert verify(await bus.read_run(run_id), REDERIVE) == []
    await bus.js.publish(ev.run_subject(run_id, "RunFailed"), ev.encode(failed.env))  # no id: stored
    log = await bus.read_run(run_id)
    assert len(log) == 3
    problems = verify(log, REDERIVE)
    assert len(problems) == 1 and problems[0].seq == log[-1].seq and "second copy" in problems[0].problem


def test_a_fact_written_by_one_that_does_not_own_it_is_flagged():
    """Each decided event has its owners (services.core.owners): one written by a producer that does not own its
    type (here a run's end by something that is no service) is flagged, however well it re-derives."""
    run = RunLog("r1")
    asked = run.add(pb.RunRequested(prompts=[""]), "cli")
    observed = pb.RunFailureObservation(service="profiler", error="prompt 1 of 1 is empty")
    run.add(run_failed(run.log, asked, observed), "tui", asked)
    problems = verify(run.log, REDERIVE)
    assert [p.problem for p in problems] == [
        "written by tui: only cli, profiler, skillstore, coder, judge, server write it"
    ]
