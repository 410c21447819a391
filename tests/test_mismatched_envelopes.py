"""Whatever made it into the run stream, the stack and its readers stand: an envelope on another run's (or
type's) subject is no event (consumers dead-letter it, readers never hand it out), and events whose fields are
absurd are shown, not crashed on. Against a real nats-server, through the `yantra` commands."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import pytest
from absurd_events import MODES, absurd_log

from services.cli import main as yantra_main
from services.core import events as ev
from services.core import swaplog
from services.core.bus import Undecodable, decode_on
from services.core.pb import events_pb2 as pb


def _request(run_id: str, event_id: str = "", model: str = "tiny-qwen2") -> ev.Envelope:
    msg = pb.RunRequested(model=model, max_candidates=2, prompts=["hi"], decode_tokens=4)
    return ev.make_envelope(run_id, msg, producer="test", time_ns=time.time_ns(), event_id=event_id or f"req-{run_id}")


@pytest.fixture
def yantra(own_nats, tmp_path, monkeypatch, capsys):
    """`yantra ARGS...` against the test's own server, in this process: (exit status, stdout, stderr)."""
    monkeypatch.setenv("NATS_URL", own_nats.url)
    monkeypatch.setenv("YANTRA_DATA_DIR", str(tmp_path / "data"))

    async def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = await asyncio.to_thread(yantra_main, list(args))  # it runs its own event loop
        out, err = capsys.readouterr()
        return code, out, err

    return run


def test_decode_on_refuses_an_envelope_of_another_run_or_type_than_its_subject():
    data = ev.encode(_request("run-a"))
    assert decode_on("yantra.run.run-a.RunRequested", data).run_id == "run-a"
    with pytest.raises(ev.BadEvent, match=r"subject yantra.run.run-b.RunRequested is run run-b's, the envelope run"):
        decode_on("yantra.run.run-b.RunRequested", data)
    with pytest.raises(ev.BadEvent, match="does not match event type RunRequested"):
        decode_on("yantra.run.run-a.RunCompleted", data)
    with pytest.raises(ev.BadEvent, match="is not a run event's"):
        decode_on("yantra.run.run-a.extra.RunRequested", data)
    dotted = _request("run-a")
    dotted.run_id = "run.a"  # no run id may hold a dot: it could never be any subject's
    with pytest.raises(ev.BadEvent):
        decode_on("yantra.run.run.a.RunRequested", ev.encode(dotted))


async def test_an_envelope_on_another_runs_subject_is_dead_lettered_and_no_reader_hands_it_out(
    own_bus, run_id, yantra, caplog
):
    bus = own_bus
    a, b, ghost = f"{run_id}-a", f"{run_id}-b", f"{run_id}-ghost"
    honest = [await bus.publish(_request(a)), await bus.publish(_request(b))]
    forged = [
        # a run that has no log of its own, requested on run b's subject: it made `yantra runs` fail
        (await bus.js.publish(ev.run_subject(b, "RunRequested"), ev.encode(_request(ghost)))).seq,
        # run a requested again, on b's subject: it started run a twice, and sat in b's log
        (await bus.js.publish(ev.run_subject(b, "RunRequested"), ev.encode(_request(a, "req-again")))).seq,
        # another type on a SwapCommitted subject: it made every read of the swaps fail
        (await bus.js.publish(ev.run_subject(b, "SwapCommitted"), ev.encode(_credit(b)))).seq,
    ]

    stop, handled = asyncio.Event(), []

    async def handler(rec):
        handled.append((rec.env.run_id, rec.type))

    subjects = [ev.run_filter("*", "RunRequested"), ev.run_filter("*", "SwapCommitted")]
    task = asyncio.create_task(bus.consume("profiler", subjects, handler, stop, max_deliver=2))
    deadline = time.monotonic() + 30
    while (len(handled) < 2 or await bus.dead_letter_count() < 3) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    await asyncio.sleep(1.0)  # anything more would be handled meanwhile
    stop.set()
    await task
    assert handled == [(a, "RunRequested"), (b, "RunRequested")]  # the services start no run from a forgery
    letters = sorted(await bus.dead_letters(), key=lambda d: d.original_seq)
    assert [d.original_seq for d in letters] == forged
    assert letters[0].reason == (
        f"undecodable: subject yantra.run.{b}.RunRequested is run {b}'s, the envelope run {ghost}'s"
    )
    assert letters[1].reason.endswith(f"the envelope run {a}'s")

    assert await bus.run_ids() == [a, b]
    assert [r.seq for r in await bus.read_run(b)] == [honest[1]]
    assert [r.seq for r in await bus.read_run(a)] == [honest[0]]
    assert await bus.read_run(ghost) == []
    with caplog.at_level(logging.WARNING, logger="services.core.bus"):
        assert [r.seq for r in await bus.read_all()] == honest
    skipped = [r.getMessage() for r in caplog.records if r.getMessage().startswith("skipping seq")]
    assert skipped[0].startswith(f"skipping seq {forged[0]} on yantra.run.{b}.RunRequested: not an event of its")
    entries = await bus.read_all(include_bad=True)
    want = [(s, ev.Recorded) for s in honest] + [(s, Undecodable) for s in forged]
    assert [(e.seq, type(e)) for e in entries] == want
    tailed = []
    async with contextlib.aclosing(bus.tail(include_bad=True, poll_s=0.1)) as following:
        async for entry in following:
            tailed.append(entry)
            if len(tailed) == len(entries):
                break
    assert tailed == entries
    assert swaplog.live_swaps(*await swaplog.read_swap_events(bus)) == []

    code, out, err = await yantra("runs")
    assert code == 0, err
    lines = out.splitlines()
    assert [line.split()[0] for line in lines[:2]] == [a, b] and ghost not in out
    assert lines[2] == "3 dead-lettered messages: see `yantra dlq`"
    code, out, err = await yantra("events")
    assert code == 0, err
    assert f"{b}  seq {forged[0]} on yantra.run.{b}.RunRequested: undecodable: subject" in out
    code, out, err = await yantra("replay", b, "--verify")
    assert (code, out.splitlines()[-1]) == (0, "replay verified: all 1 events re-derived byte for byte"), err
    code, out, err = await yantra("replay", ghost)
    assert code == 2 and f"no run {ghost!r} in the log" in err


def _credit(run_id: str) -> ev.Envelope:
    return ev.make_envelope(run_id, pb.SkillCredited(skill_id="s"), producer="t", time_ns=1, causation_id="c")


async def test_events_with_absurd_fields_are_shown_by_runs_events_and_replay(own_bus, yantra):
    """Empty strings, 5,000-character ones, the largest and least integers, NaN, infinities: every event type
    of a run, each caused by the one before, through the commands that read the log."""
    for mode in MODES:
        for rec in absurd_log(f"absurd-{mode}", mode):
            await own_bus.publish(rec.env)
    code, out, err = await yantra("runs")
    assert code == 0, err
    # (a string holding a newline splits its event's line: the commands print what events say as they say it)
    runs = [line.split()[0] for line in out.splitlines() if line.startswith("absurd-")]
    assert runs == [f"absurd-{mode}" for mode in MODES]
    code, out, err = await yantra("events")
    assert code == 0, err
    shown = [line for line in out.splitlines() if line.startswith("absurd-")]
    assert len(shown) == len(MODES) * len(ev.RUN_EVENT_NAMES) and "undecodable" not in out
    for mode in MODES:
        code, out, err = await yantra("replay", f"absurd-{mode}", "--verify")
        assert code in (0, 1) and "Traceback" not in err, err  # 1: the re-derived events differ, as they may
        assert "replay differs in" in out or "replay verified" in out, out
