"""The bus's limits in one place (services/core/bus_limits.py): the code's defaults agree, each relation broken by one
setting or limit is refused in one sentence naming both, and a service started with such a setting exits 2 with it."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest
from nats.js import api
from nats.js.errors import APIError

from services.core import bus_limits as bl
from services.core import events as ev
from services.core.bus import Bus
from services.core.bus_limits import BusLimits, limit_problems
from services.core.settings import Settings
from services.core.streams import DEDUP_WINDOW_S, RUNS_MAX_MSG_SIZE

ROOT = Path(__file__).resolve().parent.parent


def _env_limits(env: dict[str, str] | None = None, **settings) -> BusLimits:
    return BusLimits.from_env(Settings(**settings), env or {})


def test_the_codes_defaults_agree_and_so_do_the_settings_defaults():
    assert limit_problems() == []
    assert limit_problems(_env_limits()) == []
    assert _env_limits().ack_wait_s == Settings().ack_wait_s


# (how the relation is broken, the limits its sentence must name, the relation): one setting or one limit each.
BROKEN = [
    (
        lambda: _env_limits({"YANTRA_JUDGE_TIMEOUT_S": "1800"}),
        ("DEDUP_WINDOW_S", "YANTRA_JUDGE_TIMEOUT_S", "YANTRA_ACK_WAIT_S"),
        "_dedup_outlasts_a_redelivery",
    ),
    (
        lambda: _env_limits({"YANTRA_PROFILER_CALL_TIMEOUT_S": "1799"}),
        ("DEDUP_WINDOW_S", "YANTRA_PROFILER_CALL_TIMEOUT_S", "YANTRA_ACK_WAIT_S"),
        "_dedup_outlasts_a_redelivery",
    ),
    (
        lambda: _env_limits(ack_wait_s=1300.0),  # 600 s of judging + 1,300 s: past the window
        ("DEDUP_WINDOW_S", "YANTRA_ACK_WAIT_S"),
        "_dedup_outlasts_a_redelivery",
    ),
    (
        lambda: _env_limits(nats_retry_s=1800.0),
        ("DEDUP_WINDOW_S", "YANTRA_NATS_RETRY_S"),
        "_dedup_outlasts_the_election_retry",
    ),
    (lambda: _env_limits(ack_wait_s=0.5), ("YANTRA_ACK_WAIT_S", "MIN_ACK_WAIT_S"), "_ack_wait_long_enough"),
    (lambda: BusLimits(keepalive_s=3.0), ("keepalive", "YANTRA_ACK_WAIT_S"), "_keepalive_within_ack_wait"),
    (lambda: BusLimits(max_deliver=1), ("MAX_DELIVER",), "_max_deliver_retries"),
    (
        lambda: BusLimits(dlq_dedup_window_s=3000.0),  # 5 x (600 + 5 + 10) = 3,075 s of deliveries
        ("DLQ_DEDUP_WINDOW_S", "MAX_DELIVER", "YANTRA_JUDGE_TIMEOUT_S"),
        "_dlq_dedup_outlasts_the_deliveries",
    ),
    (lambda: BusLimits(dlq_max_age_s=3600.0), ("DLQ_DEDUP_WINDOW_S", "DLQ_MAX_AGE_S"), "_dlq_age_holds_its_dedup"),
    (
        lambda: BusLimits(largest_event_bytes=RUNS_MAX_MSG_SIZE + 1),
        ("MAX_SOURCE_CHARS", "RUNS_MAX_MSG_SIZE"),
        "_log_takes_the_largest_event",
    ),
    (
        lambda: BusLimits(runs_max_bytes=32 << 20),
        ("RUNS_MAX_BYTES", "MIN_RESERVED_BYTES"),
        "_log_limit_above_the_reserve_floor",
    ),
    (
        lambda: BusLimits(dlq_copy_max_bytes=RUNS_MAX_MSG_SIZE - 1),
        ("DLQ_COPY_MAX_BYTES", "RUNS_MAX_MSG_SIZE"),
        "_dlq_copies_any_event_whole",
    ),
    (
        lambda: BusLimits(nats_max_payload=RUNS_MAX_MSG_SIZE + 1000),
        ("RUNS_MAX_MSG_SIZE", "max_payload"),
        "_dead_letter_fits_a_message",
    ),
    (
        lambda: BusLimits(dlq_max_bytes=RUNS_MAX_MSG_SIZE),
        ("DLQ_MAX_BYTES", "DLQ_COPY_MAX_BYTES"),
        "_dlq_holds_a_dead_letter",
    ),
]


@pytest.mark.parametrize(("limits", "names", "relation"), BROKEN, ids=[f"{b[2]}-{i}" for i, b in enumerate(BROKEN)])
def test_each_relation_broken_alone_is_one_sentence_naming_its_limits(limits, names, relation):
    broken = limits()
    problems = limit_problems(broken)
    assert len(problems) == 1, problems  # that relation, and no other
    assert getattr(bl, relation)(broken) == problems[0]
    sentence = problems[0]
    assert all(name in sentence for name in names), (names, sentence)
    assert "\n" not in sentence and sentence.count(". ") == 0, sentence


def test_every_relation_has_a_case_that_breaks_it():
    assert {b[2] for b in BROKEN} == {r.__name__ for r in bl.RELATIONS}


def test_limits_not_numbers_read_as_their_defaults_which_their_own_service_refuses():
    limits = _env_limits({"YANTRA_JUDGE_TIMEOUT_S": "soon", "YANTRA_PROFILER_CALL_TIMEOUT_S": "-5"})
    assert (limits.judging_s, limits.profiler_call_s) == (bl.JUDGE_TIMEOUT_S, bl.PROFILER_CALL_S)


def test_the_mirrored_limits_are_their_sources():
    from services.judge import __main__ as judge_main
    from services.judge.service import CPU_TIMEOUT_S, GPU_TIMEOUT_S
    from services.profiler.adapters import CALL_TIMEOUT_S, TIMEOUT_ENV
    from services.server.live_parameters import PROFILE_BUDGET_BYTES

    assert bl.JUDGE_TIMEOUT_S == CPU_TIMEOUT_S >= GPU_TIMEOUT_S
    assert f'"{bl.JUDGE_TIMEOUT_ENV}"' in inspect.getsource(judge_main)
    assert (bl.PROFILER_CALL_S, bl.PROFILER_CALL_ENV) == (CALL_TIMEOUT_S, TIMEOUT_ENV)
    assert bl.PROFILE_LIVE_BYTES == PROFILE_BUDGET_BYTES
    dispatch = inspect.getsource(Bus._dispatch)
    assert f"ack_wait / {bl.KEEPALIVES_PER_ACK_WAIT}" in dispatch
    assert f"min(2.0 * attempts, {bl.MAX_NAK_DELAY_S})" in dispatch


async def test_the_largest_event_with_the_largest_headers_is_dead_lettered_whole(bus, run_id):
    """The dead-letter relations against a real server: its default max_payload takes the copy and its headers."""
    assert bus.nc.max_payload == bl.NATS_DEFAULT_MAX_PAYLOAD
    data = bytes(range(256)) * (RUNS_MAX_MSG_SIZE // 256)
    subject = ev.run_subject(run_id, "CandidateProposed")
    await bus.dead_letter(f"t{run_id}", data, "\U0001f600" * 4000, subject, stream=ev.RUNS_STREAM, seq=10**15 - 1)
    [letter] = await bus.dead_letters(f"t{run_id}")
    assert not letter.truncated and letter.data == data


async def test_nats_server_refuses_a_dedup_window_past_the_max_age_and_keeps_the_runs_window(bus):
    with pytest.raises(APIError):  # why `_dlq_age_holds_its_dedup` exists
        await bus.js.add_stream(
            api.StreamConfig(name="LIMITS_T", subjects=["limits-t.>"], max_age=60, duplicate_window=120)
        )
    assert (await bus.js.stream_info(ev.RUNS_STREAM)).config.duplicate_window == DEDUP_WINDOW_S


def _start(service: str, tmp_path: Path, **extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "YANTRA_"))}
    env |= {"YANTRA_DATA_DIR": str(tmp_path / "data"), **extra}
    cmd = [sys.executable, "-m", f"services.{service}"]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("service", "setting", "names"),
    [
        ("skillstore", {"YANTRA_JUDGE_TIMEOUT_S": "2000"}, ("DEDUP_WINDOW_S", "YANTRA_JUDGE_TIMEOUT_S")),
        ("judge", {"YANTRA_NATS_RETRY_S": "3600"}, ("DEDUP_WINDOW_S", "YANTRA_NATS_RETRY_S")),
    ],
)
def test_a_service_with_limits_that_disagree_says_so_in_one_line_and_exits_2(service, setting, names, tmp_path):
    done = _start(service, tmp_path, **setting)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith(f"{service}: the bus's limits do not agree: the dedup window"), lines[0]
    assert all(name in lines[0] for name in names), lines[0]


def test_a_service_with_agreeing_limits_goes_past_the_check(tmp_path):
    done = _start("skillstore", tmp_path, YANTRA_JUDGE_TIMEOUT_S="900")  # 900 + 5 s: inside the window
    assert "limits do not agree" not in done.stderr
    assert "NATS_URL is not set" in done.stderr, done.stderr  # the next thing it needs


def test_yantra_up_with_limits_that_disagree_starts_nothing_and_says_so_once(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "YANTRA_"))}
    env |= {"YANTRA_DATA_DIR": str(tmp_path / "data"), "YANTRA_JUDGE_TIMEOUT_S": "2000"}
    cmd = [sys.executable, "-m", "services.cli", "up", "--model", "tiny-qwen2"]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stdout + done.stderr
    assert "the bus's limits do not agree: the dedup window" in done.stderr, done.stderr
    assert "started" not in done.stdout and not (tmp_path / "data" / "logs").exists()  # no service was started
