"""The committed protobuf code matches proto/, and the schema keeps its promises."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from services.core import events as ev
from services.core.pb import events_pb2 as pb

ROOT = Path(__file__).resolve().parent.parent


def test_generated_code_is_not_stale():
    pytest.importorskip("grpc_tools", reason="grpcio-tools (a dev dependency) regenerates the code")
    result = subprocess.run(
        [sys.executable, "scripts/gen_proto.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_event_type_is_past_tense_and_registered():
    for name in ev.RUN_EVENT_NAMES:
        assert name in ev.EVENT_TYPES
        assert name.endswith(("ed", "RolledBack")), name


def test_envelope_round_trip_and_bad_input():
    msg = pb.CandidateProposed(candidate_id="c1", source="x = 1")
    env = ev.make_envelope("run-1", msg, producer="coder", time_ns=5, causation_id="abc")
    back = ev.decode(ev.encode(env))
    assert back == env and ev.unpack(back) == msg
    assert env.event_id == ev.derived_event_id("run-1", "abc", "CandidateProposed", 0)
    for bad in (b"\xff\x00garbage", ev.Envelope(event_id="e", run_id="r", type="Nope").SerializeToString()):
        try:
            ev.decode(bad)
        except ev.BadEvent as exc:
            assert str(exc)
        else:
            raise AssertionError("decoded garbage")


def test_run_ids_must_be_subject_tokens():
    for bad in ("", "a.b", "a b", "*", ">", "x" * 65):
        try:
            ev.run_subject(bad, "RunRequested")
        except ValueError as exc:
            assert "run id" in str(exc)
        else:
            raise AssertionError(bad)
