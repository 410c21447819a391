"""The bus against a real nats-server: ordering, dedup, consumers, redelivery, dead letters."""

from __future__ import annotations

import asyncio
import time

from services.core import events as ev
from services.core.pb import events_pb2 as pb
from services.core.runner import answer


def _request(run_id: str) -> ev.Envelope:
    msg = pb.RunRequested(model="tiny-qwen2", max_candidates=2, prompts=["hi"], decode_tokens=4)
    return ev.make_envelope(run_id, msg, producer="test", time_ns=time.time_ns(), event_id=f"req-{run_id}")


async def test_run_log_reads_back_in_order_and_dedups(bus, run_id):
    req = _request(run_id)
    await bus.publish(req)
    await bus.publish(req)  # a retried publish: same event id, dropped by the server
    for k in range(3):
        msg = pb.SkillCredited(skill_id=f"s{k}", reward=k)
        await bus.publish(ev.make_envelope(run_id, msg, producer="t", time_ns=k, causation_id=req.event_id, ordinal=k))
    got = await bus.read_run(run_id)
    assert [r.type for r in got] == ["RunRequested"] + ["SkillCredited"] * 3
    assert [r.msg.skill_id for r in got[1:]] == ["s0", "s1", "s2"]
    assert [r.seq for r in got] == sorted(r.seq for r in got)
    assert run_id in await bus.run_ids()


async def test_tail_yields_the_log_then_each_new_event_once_in_order(bus, run_id):
    import contextlib

    req = _request(run_id)
    await bus.publish(req)
    got: list[ev.Recorded] = []

    async def follow():
        async with contextlib.aclosing(bus.tail(ev.run_filter(run_id), poll_s=0.1)) as events:
            async for rec in events:
                got.append(rec)
                if len(got) == 4:
                    return

    task = asyncio.create_task(follow())
    await asyncio.sleep(0.3)  # the tail has read what was there and waits
    assert [r.type for r in got] == ["RunRequested"]
    for k in range(3):
        msg = pb.SkillCredited(skill_id=f"s{k}", reward=k)
        env = ev.make_envelope(run_id, msg, producer="t", time_ns=k, causation_id=req.event_id, ordinal=k)
        await bus.publish(env)
        await bus.publish(env)  # a duplicate publish is not a second event
    await asyncio.wait_for(task, timeout=10)
    assert [r.type for r in got] == ["RunRequested"] + ["SkillCredited"] * 3
    assert got == await bus.read_run(run_id)  # the same events, the same sequences


async def test_tail_of_a_run_that_has_no_events_yet_waits_for_them(bus, run_id):
    import contextlib

    async def first_event():
        async with contextlib.aclosing(bus.tail(ev.run_filter(run_id), poll_s=0.1)) as events:
            async for rec in events:
                return rec

    task = asyncio.create_task(first_event())
    await asyncio.sleep(0.5)  # several empty fetches time out meanwhile: none of them may end the tail
    assert not task.done()
    await bus.publish(_request(run_id))
    assert (await asyncio.wait_for(task, timeout=10)).type == "RunRequested"


async def test_read_of_unknown_run_is_empty(bus):
    assert await bus.read_run("nosuchrun") == []


class _Echo:
    name = "echo"
    consumes = ("RunRequested",)

    def __init__(self):
        self.calls = 0

    async def handle(self, trigger, prior):
        self.calls += 1
        return [pb.SkillCredited(skill_id="x", reward=len(prior))]


async def test_answer_is_idempotent(bus, run_id):
    req = _request(run_id)
    seq = await bus.publish(req)
    service = _Echo()
    trigger = ev.Recorded(seq, req)
    assert await answer(bus, service, trigger) == 1
    assert await answer(bus, service, trigger) == 0  # the run already holds the answer
    log = await bus.read_run(run_id)
    assert [r.type for r in log] == ["RunRequested", "SkillCredited"]
    assert log[1].env.causation_id == req.event_id
    assert log[1].env.event_id == ev.derived_event_id(run_id, req.event_id, "SkillCredited", 0)


async def test_consumer_dead_letters_undecodable_and_failing_messages(bus, run_id):
    stop = asyncio.Event()
    seen: list[str] = []

    async def handler(rec):
        seen.append(rec.type)
        raise RuntimeError("always fails")

    durable = f"dlq-{run_id}"
    task = asyncio.create_task(
        bus.consume(durable, [ev.run_filter(run_id, "RunRequested")], handler, stop, max_deliver=2, ack_wait=2)
    )
    await bus.js.publish(ev.run_subject(run_id, "RunRequested"), b"\xff\xfe not protobuf")
    await bus.publish(_request(run_id))
    deadline = time.monotonic() + 20
    letters = []
    while time.monotonic() < deadline:
        letters = await bus.read_dead_letters(durable)
        if len(letters) >= 2:
            break
        await asyncio.sleep(0.3)
    stop.set()
    await task
    reasons = sorted(h["Yantra-Reason"] for _, h in letters)
    assert len(letters) == 2, reasons
    assert reasons[0].startswith("failed 2 times") and reasons[1].startswith("undecodable")
    assert seen == ["RunRequested", "RunRequested"]  # retried once, then given up
