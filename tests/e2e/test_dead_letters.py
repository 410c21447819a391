"""Poison messages with services as processes: each is dead-lettered once, and `yantra` shows them.

Three services run (profiler, skillstore, coder; no model is needed, since nothing valid is asked of
them), and garbage lands on run subjects that one or two of them consume. Every garbage message must
be in the DLQ exactly once, whichever service saw it first, and `yantra dlq`, `yantra dlq show`,
`yantra runs` and `yantra events` must show it.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from services.core import events as ev
from services.core.nats_launcher import free_port
from services.core.settings import Settings
from services.core.stack import start_stack

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
GARBAGE = 50
# Consumed by the profiler; by the profiler and the skillstore; by the coder and the skillstore; by the
# coder; by the skillstore and the profiler.
SUBJECT_TYPES = ("RunRequested", "ProfileCaptured", "CandidateJudged", "SkillsRetrieved", "SwapCommitted")
SERVICES = ("profiler", "skillstore", "coder")


@pytest.fixture
def services(own_nats, tmp_path):
    settings = Settings(
        nats_url=own_nats.url,
        data_dir=tmp_path / "data",
        server_addr=f"127.0.0.1:{free_port()}",  # nobody there: no valid request is published
        device="cpu",
        log_level="INFO",
    )
    stack = start_stack(settings, SERVICES)
    yield stack
    stack.stop()
    for name in SERVICES:  # shown by pytest only when the test fails
        print(f"----- {name} log -----\n{stack.log_tail(name, 40)}")


def _yantra(stack, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, **stack.settings.env(), "NATS_URL": stack.nats_url}
    cmd = [sys.executable, "-m", "services.cli", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


async def test_each_garbage_message_is_dead_lettered_once_and_shown_by_the_cli(services, own_bus):
    bus = own_bus
    run_id = "dlq-" + uuid.uuid4().hex[:8]
    garbage: dict[int, str] = {}
    for k in range(GARBAGE):
        subject = ev.run_subject(run_id, SUBJECT_TYPES[k % len(SUBJECT_TYPES)])
        ack = await bus.js.publish(subject, b"\xde\xad garbage #%d \x00\x01" % k)
        garbage[ack.seq] = subject
    # no service consumes SkillCredited (the profiler answers RunCompleted since it may roll a run's swaps back)
    unread = (await bus.js.publish(ev.run_subject(run_id, "SkillCredited"), b"\x01 nobody consumes this")).seq

    deadline = time.monotonic() + 180
    while (count := await bus.dead_letter_count()) < GARBAGE and time.monotonic() < deadline:
        dead = services.dead()
        assert not dead, f"services died: {dead}\n" + "\n".join(services.log_tail(n, 30) for n, _ in dead)
        await asyncio.sleep(0.5)
    await asyncio.sleep(3)  # a second copy from the other consumer of a subject would land meanwhile
    letters = await bus.dead_letters()
    assert len(letters) == GARBAGE == await bus.dead_letter_count(), count
    assert Counter(d.original_seq for d in letters) == Counter(list(garbage))  # each exactly once
    for d in letters:
        assert d.original_subject == garbage[d.original_seq] and d.service in SERVICES
        assert d.reason.startswith("undecodable: not an Envelope")
    assert {d.service for d in letters if d.original_subject.endswith(".RunRequested")} == {"profiler"}

    listed = _yantra(services, "dlq")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert len(lines) == GARBAGE + 1 and lines[-1].startswith(f"{GARBAGE} dead-lettered messages")
    first = letters[0]
    assert lines[0].split()[0] == str(first.seq) and f"{first.original_subject} #{first.original_seq}" in lines[0]
    assert "undecodable: not an Envelope" in lines[0]

    shown = _yantra(services, "dlq", "show", str(first.seq))
    assert shown.returncode == 0, shown.stderr
    assert f"reason:  {first.reason}" in shown.stdout
    assert f"Nats-Msg-Id: dlq-{ev.RUNS_STREAM}-{first.original_seq}" in shown.stdout
    assert "not an event" in shown.stdout and "de ad 20 67 61 72 62 61 67 65" in shown.stdout  # hex preview
    assert "garbage #" in shown.stdout  # printable preview

    missing = _yantra(services, "dlq", "show", "99999")
    assert missing.returncode == 2 and "no dead letter 99999" in missing.stderr
    assert "Traceback" not in missing.stderr and len(missing.stderr.strip().splitlines()) == 1

    runs = _yantra(services, "runs")
    assert runs.returncode == 0, runs.stderr
    assert runs.stdout.splitlines()[-1] == f"{GARBAGE} dead-lettered messages: see `yantra dlq`"

    events = _yantra(services, "events", "--run", run_id)
    assert events.returncode == 0, events.stderr
    shown_seqs = [line for line in events.stdout.splitlines() if ": undecodable: " in line]
    assert len(shown_seqs) == GARBAGE + 1  # the one no service consumes too
    assert f"seq {unread} on {ev.run_subject(run_id, 'SkillCredited')}: undecodable: not an Envelope" in events.stdout
