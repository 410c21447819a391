"""One line per event, as `yantra events`, `optimize` and `rollback` print them."""

from __future__ import annotations

from services.core import events as ev
from services.core.describe import describe
from services.core.pb import events_pb2 as pb


def _line(msg, producer: str = "server") -> str:
    env = ev.make_envelope("r1", msg, producer=producer, time_ns=1_700_000_000_000_000_000, event_id="e1")
    return describe(ev.Recorded(1, env))


def test_a_rollback_request_and_its_answer_name_the_swap_and_why():
    asked = _line(pb.RollbackRequested(swap_id="swap-c1", reason="the kernel raised while serving: ValueError: x"))
    assert "server" in asked and "RollbackRequested" in asked
    assert asked.endswith("swap-c1: the kernel raised while serving: ValueError: x")
    done = _line(pb.SwapRolledBack(swap_id="swap-c1", candidate_id="c1", reason="rolled back 5 modules: operator"))
    assert done.endswith("c1: rolled back 5 modules: operator")
