"""Disk faults: a data dir that refuses writes, or a JetStream store that is full or turned off, is one line
and a non-zero status for every command, never a traceback; and `yantra up` restarts an embedded
nats-server whose JetStream turned itself off, once its disk has room again.

What can be made here without mounting anything (tests run as root, for whom a mode of 0o555 forbids
nothing): a directory made immutable (chattr +i refuses even root), a path under /sys (mkdir there is
refused), a real nats-server with a tiny max_file_store (its store fills), and a real nats-server whose
JetStream is turned off by a config reload, through the same DisableJetStream a full disk goes through.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from services.cli.stack_cmds import (
    JS_FAILED_PROBES,
    JS_MIN_FREE_BYTES,
    JetStreamWatch,
    jetstream_action,
    store_write_failure,
)
from services.core.bus import Bus
from services.core.nats_launcher import _port_open, find_nats_server, free_port, start_nats
from services.core.restart_budget import RestartBudget
from services.core.settings import Settings
from services.core.stack import NATS_CONFIG, STACK_FILE, StackError, check_writable, start_stack

pytestmark = pytest.mark.slow  # a stack whose disk fails under it

ROOT = Path(__file__).resolve().parent.parent


def _yantra(*args: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "YANTRA_"))}
    return subprocess.run(
        [sys.executable, "-m", "services.cli", *args],
        cwd=ROOT,
        env={**base, "YANTRA_SERVER_ADDR": f"127.0.0.1:{free_port()}", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@contextlib.contextmanager
def immutable(path: Path):
    """`path` with the immutable attribute: nothing can be created in it, not even by root."""
    chattr = shutil.which("chattr")
    if chattr is None:
        pytest.skip("chattr is not installed: no directory can refuse root's writes here")
    made = subprocess.run([chattr, "+i", str(path)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"chattr +i is refused here ({made.stderr.strip()}): no directory can refuse root's writes")
    try:
        yield path
    finally:
        subprocess.run([chattr, "-i", str(path)], check=True)


@pytest.mark.parametrize("command", ["up", "demo"])
def test_a_data_dir_that_refuses_writes_is_one_line(command, tmp_path):
    frozen = tmp_path / "frozen"
    frozen.mkdir()
    with immutable(frozen):
        result = _yantra(command, "--data-dir", str(frozen))
        assert result.returncode == 2, result.stdout + result.stderr
        assert result.stderr.strip() == (
            f"yantra {command}: the data dir {frozen} is not writable (Operation not permitted); give --data-dir"
            " (or YANTRA_DATA_DIR) a writable directory"
        ), result.stderr
        assert list(frozen.iterdir()) == []  # nothing half-made
        # readers are not refused for it: they write nothing there
        runs = _yantra("runs", "--data-dir", str(frozen))
        assert runs.returncode == 2 and "no `yantra up` is running" in runs.stderr, runs.stderr
    sysfs = Path("/sys/kernel/yantra-data")
    if not Path("/sys/kernel").is_dir():
        return
    result = _yantra(command, "--data-dir", str(sysfs))
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().startswith(f"yantra {command}: cannot create the data dir {sysfs}: ")
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_check_writable_leaves_nothing_behind(tmp_path):
    check_writable(tmp_path / "new" / "dir")
    assert list((tmp_path / "new" / "dir").iterdir()) == []
    frozen = tmp_path / "frozen"
    frozen.mkdir()
    with immutable(frozen), pytest.raises(StackError, match="is not writable"):
        check_writable(frozen)


# ------------------------------------------------------------------ JetStream full or off


def _nats_with_config(tmp_path: Path, config: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    conf = tmp_path / "tiny.conf"
    conf.write_text(f'listen: "127.0.0.1:{port}"\n{config}\n')
    log = open(tmp_path / "tiny.log", "ab")  # noqa: SIM115 - the child's
    proc = subprocess.Popen([find_nats_server(), "-c", str(conf)], stdout=log, stderr=log)
    deadline = time.monotonic() + 10
    while not _port_open(port):
        assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "tiny.log").read_text()
        time.sleep(0.02)
    return proc, f"nats://127.0.0.1:{port}"


async def test_a_full_jetstream_store_is_one_line_for_a_command_that_writes(tmp_path):
    from services.cli.run_cmds import request_run
    from services.core.pb import events_pb2 as pb

    proc, url = _nats_with_config(tmp_path, f'jetstream {{ store_dir: "{tmp_path / "store"}", max_file_store: 1MB }}')
    try:
        bus = await Bus.connect(url)
        run_id = await request_run(
            bus, model="tiny-qwen2", policy=pb.SwapPolicy(), max_candidates=1, prompts=["hi"], decode_tokens=4
        )
        with pytest.raises(Exception) as full:  # noqa: PT011 - whatever nats-py calls it, the store is full
            while True:
                await bus.js.publish("yantra.metrics.filler", b"x" * 20_000, timeout=5)
        await bus.close()
        assert "insufficient resources" in str(full.value.__dict__)
        result = await asyncio.to_thread(_yantra, "cancel", run_id, "--reason", "test", NATS_URL=url)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stdout + result.stderr
        # the last line says it (the lines before: the streams' own warnings that they keep no byte limit)
        said = result.stderr.strip().splitlines()[-1]
        assert said.startswith("yantra cancel: ") and "insufficient resources" in said and "10023" in said, said
        listed = await asyncio.to_thread(_yantra, "runs", NATS_URL=url)  # reading still works
        assert listed.returncode == 0 and run_id in listed.stdout, listed.stdout + listed.stderr
    finally:
        proc.terminate()
        proc.wait()


def _turn_jetstream_off(config: Path, pid: int) -> None:
    """Rewrite a running nats-server's config without JetStream and have it reload: it calls the same
    DisableJetStream a store that cannot be written makes it call, and serves plain NATS on."""
    text = config.read_text()
    start = text.index("jetstream {")
    end = text.index("}", start) + 1
    config.write_text(text[:start] + "jetstream: disabled" + text[end:])
    os.kill(pid, signal.SIGHUP)
    time.sleep(1.0)


async def test_every_command_says_jetstream_is_unavailable_in_one_line(tmp_path):
    server = start_nats(tmp_path / "store")
    try:
        bus = await Bus.connect(server.url)  # the streams exist, then JetStream goes
        await bus.close()
        _turn_jetstream_off(server.config_file, server.process.pid)
        for command in (("runs",), ("events",), ("swaps",), ("dlq",)):
            result = await asyncio.to_thread(_yantra, *command, NATS_URL=server.url)
            assert result.returncode == 2, result.stdout + result.stderr
            lines = result.stderr.strip().splitlines()
            assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
            assert lines[0].startswith(f"yantra {command[0]}: NATS at {server.url}: ")
            assert "JetStream is unavailable on that NATS server" in lines[0] and "free some space" in lines[0]
    finally:
        server.stop()
    # a server that never had JetStream: nothing answers its API at all (nats-py: "no responders")
    proc, url = _nats_with_config(tmp_path, "")
    try:
        result = await asyncio.to_thread(_yantra, "runs", NATS_URL=url)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        assert result.stderr.strip().startswith(f"yantra runs: NATS at {url}: JetStream did not answer (no responders)")
    finally:
        proc.terminate()
        proc.wait()


def test_the_supervisor_restarts_only_when_jetstream_failed_twice_and_the_disk_has_room():
    room = JS_MIN_FREE_BYTES
    assert jetstream_action(0, 0) == "ok"  # answering: nothing to do, however full the disk
    assert jetstream_action(1, room * 100) == "recheck"  # one miss may be a busy moment
    assert jetstream_action(JS_FAILED_PROBES, room - 1) == "wait_for_space"  # a restart would turn it off again
    assert jetstream_action(JS_FAILED_PROBES, room) == "restart"
    assert jetstream_action(JS_FAILED_PROBES + 5, room) == "restart"


def test_a_write_to_the_store_that_failed_is_read_in_nats_servers_log():
    logged = (
        "[61] 2026/12/03 19:11:24.086363 [INF] Server is ready\n"
        "[61] 2026/12/03 19:11:25.597252 [ERR] Filestore [S] Critical write error: write /d/1.blk: no space left on"
        " device\n[61] 2026/12/03 19:11:25.597390 [ERR] JetStream stream '$G > S' critical write error: ...\n"
    )
    assert store_write_failure(logged) == "Filestore [S] Critical write error: write /d/1.blk: no space left on device"
    assert store_write_failure("[7] 2026/12/03 10:00:00.0 [ERR] JetStream out of File resources, will be DISABLED")
    assert store_write_failure("[61] 2026/12/03 19:11:24.086363 [INF] Server is ready\n") == ""


async def test_the_supervisor_brings_jetstream_back_by_restarting_nats_on_the_same_port_and_store(tmp_path, capsys):
    settings = Settings(data_dir=tmp_path / "d", server_addr=f"127.0.0.1:{free_port()}")
    stack = start_stack(settings, ())
    watch = JetStreamWatch(stack)
    try:
        bus = await Bus.connect(stack.nats_url)
        await bus.js.publish("yantra.metrics.before", b"kept")
        await bus.close()
        old_pid, port = stack.nats.process.pid, stack.nats.port
        budget = RestartBudget.from_env({})
        budget.started("nats-server", 0.0)
        now = 1000.0
        await watch.check(budget, now)
        assert watch.failed == 0 and stack.nats.process.pid == old_pid  # JetStream answers: nothing done

        _turn_jetstream_off(stack.nats.config_file, old_pid)
        await watch.check(budget, now := now + 5)
        assert watch.failed == 1 and stack.nats.process.pid == old_pid  # once is not enough
        # the restart must not need to write the config: a full disk would refuse it. An immutable data dir
        # refuses any new file; the config is rewritten only because the test changed it, so put it back first.
        config = stack.settings.data_dir / NATS_CONFIG
        text = config.read_text().replace("jetstream: disabled", f'jetstream {{ store_dir: "{stack.nats.store_dir}" }}')
        config.write_text(text)
        with immutable(stack.settings.data_dir):
            await watch.check(budget, now := now + 5)
        out = capsys.readouterr().out
        assert f"restarting nats-server on {stack.nats_url} with its store kept" in out, out
        assert "JetStream is unavailable on the embedded nats-server (JetStream did not answer" in out
        assert f"cannot write {stack.settings.data_dir / STACK_FILE}" in out  # said, and the stack runs on
        assert stack.nats.process.pid != old_pid and stack.nats.port == port and watch.failed == 0

        bus = await Bus.connect(stack.nats_url)  # the same URL, the stream and what it held
        kept = await bus.js.get_last_msg("YANTRA_METRICS", "yantra.metrics.before")
        assert kept.data == b"kept"
        await bus.close()
        await watch.check(budget, now := now + 5)
        assert watch.failed == 0
    finally:
        await watch.close()
        stack.stop()


async def test_a_file_a_command_writes_where_it_cannot_is_one_line(own_nats, tmp_path):
    from services.cli.run_cmds import request_run
    from services.core.pb import events_pb2 as pb

    bus = await Bus.connect(own_nats.url)
    run_id = await request_run(
        bus, model="tiny-qwen2", policy=pb.SwapPolicy(), max_candidates=1, prompts=["hi"], decode_tokens=4
    )
    await bus.close()
    frozen = tmp_path / "frozen"
    frozen.mkdir()
    with immutable(frozen):
        target = frozen / "run.jsonl"
        result = await asyncio.to_thread(_yantra, "replay", run_id, "--export", str(target), NATS_URL=own_nats.url)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip() == f"yantra replay: Operation not permitted ({target})", result.stderr


async def test_a_service_starting_while_jetstream_is_off_waits_for_it_instead_of_exiting(tmp_path, caplog):
    from services.core import service_main

    server = start_nats(tmp_path / "store")
    port = server.port
    try:
        bus = await Bus.connect(server.url)  # the streams exist, then JetStream goes
        await bus.close()
        _turn_jetstream_off(server.config_file, server.process.pid)
        url = f"nats://someone:s3cret@127.0.0.1:{port}"  # a URL may carry a password: never logged
        connecting = asyncio.ensure_future(service_main.connect_with_retry(url, "waiter", patience_s=1.0))
        await asyncio.sleep(6.5)  # past its patience for a NATS that does not answer at all, and one JetStream timeout
        assert not connecting.done(), connecting.exception()
        said = [r.getMessage() for r in caplog.records if "waiting for it" in r.getMessage()]
        assert len(said) == 1, said  # said once, not at every try
        assert f"JetStream at nats://***@127.0.0.1:{port} does not answer" in said[0] and "s3cret" not in said[0]
        server.stop()  # restarted with JetStream on, on the same port and store, as `yantra up`'s watch does
        server = start_nats(tmp_path / "store", port=port)
        bus = await asyncio.wait_for(connecting, 30)
        assert (await bus.js.stream_info("YANTRA_RUNS")).config.name == "YANTRA_RUNS"
        await bus.close()
    finally:
        server.stop()
