"""A run that cannot finish ends with RunFailed or RunCancelled, and nothing answers it afterwards."""

from __future__ import annotations

import asyncio

from runlog import RunLog, has, publish, wait_for_log

from services.core import events as ev
from services.core import run_end
from services.core.pb import events_pb2 as pb
from services.core.runner import answer, give_up, run_service


class Counting:
    """A service that answers every RunRequested and RollbackRequested with one RunCompleted / SwapRolledBack."""

    name = "counting"
    consumes = ("RunRequested", "RollbackRequested")

    def __init__(self):
        self.handled = 0

    async def handle(self, trigger, prior):
        self.handled += 1
        if trigger.type == "RollbackRequested":
            return [pb.SwapRolledBack(swap_id=trigger.msg.swap_id, reason="rolled back")]
        return [pb.RunCompleted(outcome="no_target")]


def test_state_says_how_each_run_ended():
    run = RunLog()
    asked = run.add(pb.RunRequested(), "cli")
    assert run_end.state(run.log) == "running (RunRequested)" and run_end.ended(run.log) is None
    cancelled = run.add(pb.RunCancelled(reason="wrong model"), "cli")
    assert run_end.state(run.log) == "cancelled: wrong model" and run_end.stopped(run.log) is cancelled
    assert not run_end.answers(run.log, asked)
    assert run_end.answers(run.log, run.add(pb.RollbackRequested(swap_id="s"), "cli"))  # a kernel stays removable

    failed = RunLog()
    asked = failed.add(pb.RunRequested(), "cli")
    observed = pb.RunFailureObservation(service="judge", error="RuntimeError('x')", attempts=5)
    failed.add(run_end.run_failed(failed.log, asked, observed), "judge", asked)
    assert run_end.state(failed.log) == "failed: judge could not answer RunRequested (gave up after 5 attempts): " + (
        "RuntimeError('x')"
    )


async def test_a_cancelled_run_gets_no_answer_but_a_rollback_does(bus, run_id):
    service = Counting()
    asked = await publish(bus, run_id, pb.RunRequested(), "cli")
    await bus.publish(
        ev.make_envelope(run_id, pb.RunCancelled(reason="test"), producer="cli", time_ns=1, event_id=f"cancel-{run_id}")
    )
    assert await answer(bus, service, asked) == 0 and service.handled == 0
    rollback = ev.make_envelope(
        run_id, pb.RollbackRequested(swap_id="s"), producer="cli", time_ns=2, event_id=f"rb-{run_id}"
    )
    await bus.publish(rollback)
    assert await answer(bus, service, ev.Recorded(0, rollback)) == 1


async def test_giving_up_on_a_trigger_ends_the_run_once(bus, run_id):
    asked = await publish(bus, run_id, pb.RunRequested(), "cli")
    assert await give_up(bus, "judge", asked, "RuntimeError('boom')", 5)
    assert not await give_up(bus, "coder", asked, "later", 5)  # the run has ended: nothing more is written
    log = await bus.read_run(run_id)
    assert [r.type for r in log] == ["RunRequested", "RunFailed"]
    failed = log[-1]
    assert failed.env.producer == "judge" and failed.env.causation_id == asked.env.event_id
    assert "judge could not answer RunRequested (gave up after 5 attempts): RuntimeError('boom')" == failed.msg.reason


class Failing:
    """A service whose handler raises on every delivery (a bug, a dependency that is down for good)."""

    consumes = ("RunRequested",)

    def __init__(self, name: str):
        self.name = name

    async def handle(self, trigger, prior):
        raise RuntimeError("the model is not loaded")


async def test_a_trigger_that_fails_every_delivery_ends_its_run_with_run_failed(bus, run_id):
    stop = asyncio.Event()
    service = Failing(f"failing-{run_id}")
    task = asyncio.create_task(run_service(bus, service, stop, ack_wait=5, max_deliver=2))
    try:
        await publish(bus, run_id, pb.RunRequested(), "cli")
        log = await wait_for_log(bus, run_id, has("RunFailed"), 20)
    finally:
        stop.set()
        await task
    failed = ev.last(log, "RunFailed")
    assert failed.env.producer == service.name
    why = "RuntimeError('the model is not loaded')"
    assert failed.msg.reason == f"{service.name} could not answer RunRequested (gave up after 2 attempts): {why}"
    assert run_end.state(log).startswith("failed: ")
