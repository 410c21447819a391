"""`yantra events`: an unknown run is an error, event text cannot act on the terminal, and --follow outlives a
stack that comes back on another NATS port (real nats-servers, the real command)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from services.cli.log_cmds import follow_events
from services.core import events as ev
from services.core.bus import Bus
from services.core.nats_launcher import free_port, start_nats
from services.core.pb import events_pb2 as pb
from services.core.settings import Settings
from services.core.stack import STACK_FILE

ROOT = Path(__file__).resolve().parent.parent


def _yantra(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "services.cli", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def _event(run_id: str, msg) -> ev.Envelope:
    return ev.make_envelope(run_id, msg, producer="test", time_ns=time.time_ns(), event_id=str(uuid.uuid4()))


def test_events_of_a_run_that_is_not_in_the_log_is_an_error(nats_server):
    for follow in ([], ["--follow"]):
        result = _yantra("events", "--run", "nope", *follow, env={"NATS_URL": nats_server.url})
        assert result.returncode == 2, (follow, result.stdout, result.stderr)
        assert "no run 'nope' in the log" in result.stderr and "Traceback" not in result.stderr
        assert result.stdout == ""


async def test_events_of_a_run_with_nothing_of_the_type_asked_is_no_error(bus, nats_server, run_id):
    await bus.publish(_event(run_id, pb.RunRequested(model="tiny-qwen2")))
    result = _yantra("events", "--run", run_id, "--type", "SwapCommitted", env={"NATS_URL": nats_server.url})
    assert result.returncode == 0 and result.stdout == "", result.stderr


async def test_control_characters_in_event_text_are_printed_escaped(bus, nats_server, run_id):
    # A reason as a hostile or broken producer could write it: recolour, retitle the window, overwrite the line.
    reason = "stopped \x1b[31mred\x1b]0;owned\x07 \r\x9b2J done"
    await bus.publish(_event(run_id, pb.RunRequested(model="tiny-\x1b[2Jqwen2")))
    await bus.publish(_event(run_id, pb.RunCancelled(reason=reason)))
    for command in (["events", "--run", run_id], ["replay", run_id], ["runs"]):
        result = _yantra(*command, env={"NATS_URL": nats_server.url})
        assert result.returncode == 0, result.stderr
        assert not {"\x1b", "\x07", "\r", "\x9b"} & set(result.stdout), (command, result.stdout)
        assert "tiny-\\x1b[2Jqwen2" in result.stdout, command
        if command[0] != "runs":  # which lists runs by model and state
            assert "stopped \\x1b[31mred\\x1b]0;owned\\x07 \\x0d\\x9b2J done" in result.stdout, command


def _record_stack(data: Path, url: str) -> None:
    """stack.json as a running `yantra up` writes it (this process stands in for its pid)."""
    info = {"pid": os.getpid(), "nats_url": url, "server_addr": f"127.0.0.1:{free_port()}", "pids": {}}
    (data / STACK_FILE).write_text(json.dumps(info))


async def _until(check, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def _publish(url: str, env: ev.Envelope) -> None:
    bus = await Bus.connect(url, name="test-publisher")
    try:
        await bus.publish(env)
    finally:
        await bus.close()


def _follow(data: Path, run_id: str) -> tuple[asyncio.Task, list[str], list[str]]:
    """`yantra events --follow --run RUN` on the stack of `data` as a task: (the task, lines printed, notices)."""
    lines: list[str] = []
    notices: list[str] = []
    settings = Settings.from_env(data_dir=data)
    follower = asyncio.create_task(
        follow_events(settings, ev.run_filter(run_id), out=lines.append, notice=notices.append, poll_s=0.1)
    )
    return follower, lines, notices


async def test_follow_goes_on_when_the_stack_comes_back_on_another_nats_port(tmp_path, monkeypatch, run_id):
    """The stack stops and a new one starts on the same data dir, its nats-server on another port (the store
    kept): the follower finds it through stack.json, says so on stderr, and prints what follows, once."""
    monkeypatch.delenv("NATS_URL", raising=False)
    data, store = tmp_path / "data", tmp_path / "store"
    data.mkdir()
    first = start_nats(store, log_file=tmp_path / "first.log")
    second = None
    _record_stack(data, first.url)
    await _publish(first.url, _event(run_id, pb.RunRequested(model="before")))
    follower, lines, notices = _follow(data, run_id)
    try:
        await _until(lambda: len(lines) == 1)
        first.stop()
        second = start_nats(store, port=free_port(avoid={first.port}), log_file=tmp_path / "second.log")
        _record_stack(data, second.url)
        await _publish(second.url, _event(run_id, pb.RunCancelled(reason="after the move")))
        await _until(lambda: len(lines) == 2)
        await asyncio.sleep(0.5)  # room for a duplicate to show
        assert "before" in lines[0] and "after the move" in lines[1] and len(lines) == 2, lines
        assert any(f"lost the connection to NATS at 127.0.0.1:{first.port}" in n for n in notices), notices
        assert any(f"following again on NATS at 127.0.0.1:{second.port}" in n for n in notices), notices
        assert not follower.done()
    finally:
        follower.cancel()
        await asyncio.gather(follower, return_exceptions=True)
        first.stop()
        if second is not None:
            second.stop()


async def test_follow_says_when_nats_restarts_on_its_port_and_prints_on(tmp_path, monkeypatch, run_id):
    """`yantra up` restarts a nats-server that died on the same port: the client reconnects by itself, and the
    follower says so and prints on, each event once."""
    monkeypatch.delenv("NATS_URL", raising=False)
    data, store = tmp_path / "data", tmp_path / "store"
    data.mkdir()
    server = start_nats(store, log_file=tmp_path / "nats.log")
    _record_stack(data, server.url)
    await _publish(server.url, _event(run_id, pb.RunRequested(model="before")))
    follower, lines, notices = _follow(data, run_id)
    try:
        await _until(lambda: len(lines) == 1)
        server.stop()
        await _until(lambda: any("lost the connection" in n for n in notices))
        server = start_nats(store, port=server.port, log_file=tmp_path / "nats.log")
        await _publish(server.url, _event(run_id, pb.RunCancelled(reason="after the restart")))
        await _until(lambda: len(lines) == 2)
        await _until(lambda: any(f"following again on NATS at 127.0.0.1:{server.port}" in n for n in notices))
        assert "after the restart" in lines[1] and len(lines) == 2, lines
    finally:
        follower.cancel()
        await asyncio.gather(follower, return_exceptions=True)
        server.stop()
