"""Live mode against a real nats-server: tailing, unknown types, metrics, a lost server, replay from the stream."""

from __future__ import annotations

import asyncio
import time

import tui_fixtures as fx
from tui_pilot_helpers import screen_text, settle, until

from services.core.bus import Bus
from services.core.nats_launcher import free_port, start_nats
from services.core.settings import Settings
from tui.app import LiveConfig, make_app
from tui.model import fold
from tui.sources import ReplayError, load_run, resolve_replay

SIZE = (80, 24)


def _live(url: str):
    app = make_app(LiveConfig(Settings(nats_url=url)))
    app.animation_level = "none"
    return app


async def test_live_tail_shows_runs_metrics_and_unknown_events_as_they_are_published(bus, nats_server, run_id):
    envs = fx.swapped_run(time.time_ns(), run_id=run_id)
    alien = fx.unknown_event_run(time.time_ns(), run_id=run_id)[1]
    metric = fx.server_metrics(time.time_ns(), 1, None, 20.0, 20.0)[0]
    app = _live(nats_server.url)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.link is not None and app.link.state == "connected")
        for env in envs[:3]:
            await bus.publish(env)
        await until(pilot, lambda: run_id in app.state.runs and app.state.runs[run_id].status == "coding")
        assert "● live connected" in screen_text(app)[0]
        for env in envs[3:]:
            await bus.publish(env)
        await bus.publish(alien)
        await bus.publish_metrics(metric)
        await until(pilot, lambda: app.state.runs[run_id].unknown_events == 1 and app.state.metrics)
        run = app.state.runs[run_id]
        assert run.outcome == "swapped" and [c.candidate_id for c in run.candidates] == [
            "c-5e1a0b",
            "c-9d33f1",
            "c-41be07",
        ]
        assert [e.type for e in run.events] == [e.type for e in envs] + ["KernelAutotuned"]  # each once, in order
        app.open_run(run_id)
        await settle(pilot)
        assert run_id in screen_text(app)[1]


async def test_a_lost_server_is_shown_and_retried_then_tailing_resumes_without_repeats(tmp_path):
    port = free_port()
    store = tmp_path / "nats"
    server = start_nats(store, port=port)
    url = server.url
    envs = fx.rollback_run(time.time_ns(), run_id="tui-lost-1")
    try:
        bus = await Bus.connect(url)
        for env in envs[:4]:
            await bus.publish(env)
        await bus.close()
        app = _live(url)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.state.events_seen == 4)
            server.stop()
            await until(pilot, lambda: app.link.state == "lost")
            assert "○ live lost" in screen_text(app)[0] and "retrying" in screen_text(app)[0]
            await pilot.pause(1.0)  # a few failed attempts: the app keeps running
            server = start_nats(store, port=port)  # the same store: the stream survives
            await until(pilot, lambda: app.link.state == "connected")
            bus = await Bus.connect(url)
            for env in envs[4:]:
                await bus.publish(env)
            await bus.close()
            await until(pilot, lambda: app.state.events_seen == len(envs))
            assert [e.type for e in app.state.runs["tui-lost-1"].events] == [e.type for e in envs]
            assert app.state.runs["tui-lost-1"].outcome == "rolled_back"
    finally:
        server.stop()


async def test_a_server_without_streams_is_waited_for(tmp_path):
    server = start_nats(tmp_path / "fresh")
    try:
        app = _live(server.url)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.link is not None and app.link.state == "waiting")
            assert "no yantra streams yet" in screen_text(app)[0]
            bus = await Bus.connect(server.url)  # what `yantra up` does first: make the streams
            await bus.publish(fx.no_target_run(time.time_ns(), run_id="tui-fresh-1")[0])
            await bus.close()
            await until(pilot, lambda: "tui-fresh-1" in app.state.runs)
            assert app.link.state == "connected"
    finally:
        server.stop()


async def test_no_server_at_all_is_a_state_on_screen_not_a_crash():
    app = _live(f"nats://127.0.0.1:{free_port()}")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.link is not None and app.link.state == "lost")
        status = screen_text(app)[0]
        assert status.startswith(" ○ live lost │ 0 runs") and "no NATS server answered" in status
        await pilot.press("question_mark")
        await settle(pilot)
        assert app.is_running


async def test_replay_of_a_run_from_the_stream_brings_its_metrics_along(bus, nats_server, run_id):
    start = time.time_ns()
    envs = fx.swapped_run(start, run_id=run_id)
    swap_s = (envs[-4].time_unix_ns - start) / 1e9
    metrics = fx.server_metrics(start, 30, swap_s, 14.2, 36.9)
    for env in envs:
        await bus.publish(env)
    for m in metrics:
        await bus.publish_metrics(m)
    log = await load_run(nats_server.url, run_id)
    run_events = [r for r in log if r.type != "ServerMetrics"]
    assert [r.env.event_id for r in run_events] == [e.event_id for e in envs]  # stream order kept
    assert sum(r.type == "ServerMetrics" for r in log) >= 30
    times = [r.env.time_unix_ns for r in log]
    assert times == sorted(times)  # metrics slotted in by time
    state = fold(log)
    assert state.runs[run_id].outcome == "swapped" and [m.kind for m in state.marks] == ["swap"]


async def test_replay_of_a_missing_run_says_so(nats_server):
    try:
        await load_run(nats_server.url, "no-such-run")
    except ReplayError as exc:
        assert "no run 'no-such-run'" in str(exc)
    else:
        raise AssertionError("expected ReplayError")


def test_resolve_replay_reads_a_run_id_from_the_stream(nats_server, tmp_path):
    async def publish() -> None:
        bus = await Bus.connect(nats_server.url)
        for env in fx.unknown_event_run(time.time_ns(), run_id="tui-resolve-1"):
            await bus.publish(env)
        await bus.close()

    asyncio.run(publish())
    log, label = resolve_replay("tui-resolve-1", lambda: nats_server.url)
    run_events = [r.type for r in log if r.type != "ServerMetrics"]  # metrics of the other tests' server may join
    assert label == "tui-resolve-1" and run_events == ["RunRequested", "KernelAutotuned", "ProfileCaptured"]
