"""Reading a subject whole, or failing: a read that JetStream stops feeding must not return part of a log as all of it.

A real nats-server, paused with SIGSTOP after the reader's consumer is made and its pending count read: every fetch
then times out. The read used to return what it had (here: nothing) as if it were the whole log; now it tries a
bounded number of times and raises ShortRead, naming how many messages it missed, and the CLI says it in one line.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import pytest

from services.cli.common import nats_problem
from services.core import events as ev
from services.core.pb import events_pb2 as pb
from services.core.stream_read import ShortRead, drain, read_msgs


async def _publish(bus, run_id: str, count: int) -> None:
    for k in range(count):
        msg = pb.SkillCredited(skill_id=f"s{k}", reward=1)
        await bus.publish(ev.make_envelope(run_id, msg, producer="t", time_ns=k, event_id=f"{run_id}-{k}"))


async def test_a_read_gets_every_message_in_order(own_bus, run_id):
    await _publish(own_bus, run_id, 300)  # more than one fetch
    msgs = await read_msgs(own_bus.js, ev.RUNS_STREAM, ev.run_filter(run_id))
    seqs = [m.metadata.sequence.stream for m in msgs]
    assert len(msgs) == 300 and seqs == sorted(set(seqs))


def _stop(pid: int) -> None:
    """SIGSTOP `pid` and wait until every thread of it is stopped: the signal is asynchronous, and a server thread
    still running for a few milliseconds after kill() returned once answered the read's first fetch (a flaky pass
    of a read that should have stalled)."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        states = []
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):  # a thread that ended meanwhile
                states.append((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
        if states and all(state in "tT" for state in states):
            return
        time.sleep(0.01)
    raise AssertionError(f"nats-server {pid} did not stop: thread states {states}")


async def test_a_read_that_jetstream_stops_feeding_fails_naming_what_it_missed(own_nats, own_bus, run_id):
    await _publish(own_bus, run_id, 20)
    subject = ev.run_filter(run_id)
    psub = await own_bus.js.pull_subscribe(subject, stream=ev.RUNS_STREAM)
    pending = (await psub.consumer_info()).num_pending
    assert pending == 20
    _stop(own_nats.process.pid)
    try:
        with pytest.raises(ShortRead) as caught:
            await drain(psub, subject, pending, fetch_s=0.3, tries=2)
    finally:
        os.kill(own_nats.process.pid, signal.SIGCONT)
    short = caught.value
    assert (short.got, short.missing) == (0, 20) and isinstance(short, TimeoutError)
    line = nats_problem(short)
    assert line.startswith(f"read 0 of the 20 messages on {subject}") and "not read whole" in line, line
    assert len(await drain(psub, subject, pending)) == 20  # the server back: the same read is whole
    await psub.unsubscribe()  # an open pull subscription would hold the bus's close for its 30 s drain
