"""What the TUI shows, as a pure fold over the event stream: `evolve(state, recorded) -> state`.

Live tailing and replay both feed this one fold, one event at a time, in the order the events
were read. That is what makes "the screen at any point of a replay equals what it showed live at
that point" true: the screen is a function of the state, and the state is a function of the
events seen so far. No clock, no I/O, nothing but the events. The views it builds are in
tui/views.py; how each event type changes a run is in tui/run_events.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from google.protobuf.message import Message

from services.core import events as ev
from services.core.describe import _summary  # the CLI's one-line summary, so both read alike
from services.core.events import Recorded
from tui.run_events import apply_run_event, judged_dtype_bytes
from tui.views import (
    MAX_METRIC_POINTS,
    STEP_NAMES,
    CandidateView,
    EventRow,
    Mark,
    MetricPoint,
    ProfileView,
    RunView,
    State,
    Step,
    TargetRow,
)

__all__ = [
    "MAX_METRIC_POINTS", "STEP_NAMES", "CandidateView", "EventRow", "Mark", "MetricPoint", "ProfileView", "RunView",
    "State", "Step", "TargetRow", "evolve", "fold", "judged_dtype_bytes", "summary",
]  # fmt: skip


def summary(rec: Recorded, msg: Message | None) -> str:
    if msg is None:
        return f"unknown event type {rec.type!r} ({len(rec.env.payload)} bytes): not understood by this TUI"
    try:
        return _summary(rec.type, msg)
    except Exception as exc:  # a summary must never take the screen down
        return f"(cannot summarise: {exc})"


def _message(rec: Recorded) -> Message | None:
    """The event's message, or None for a type this TUI does not know (or a payload that does not parse)."""
    try:
        return rec.msg
    except ev.BadEvent:
        return None


def _metric(rec: Recorded, m: Message) -> MetricPoint:
    return MetricPoint(
        rec.env.time_unix_ns, m.server_id, m.tokens_per_s, m.p50_latency_ms, m.p95_latency_ms, m.requests,
        m.active_swaps, m.active_requests, m.batch_requests, m.waiting_requests,
    )  # fmt: skip


def evolve(state: State, rec: Recorded) -> State:
    """The state after one more event."""
    msg = _message(rec)
    index = state.events_seen
    if msg is not None and rec.type in ev.METRIC_EVENT_NAMES:
        metrics = (*state.metrics, _metric(rec, msg))[-MAX_METRIC_POINTS:]
        return replace(state, metrics=metrics, events_seen=index + 1, last_ns=rec.env.time_unix_ns)
    env = rec.env
    t = env.time_unix_ns
    row = EventRow(index, rec.seq, env.run_id, env.type, env.producer, t, msg is not None, summary(rec, msg), rec)
    old = state.runs.get(env.run_id)
    run = old or RunView(env.run_id)
    run = replace(run, events=(*run.events, row), updated_ns=max(run.updated_ns, t))
    if msg is None:
        run = replace(run, unknown_events=run.unknown_events + 1)
    else:
        run = apply_run_event(run, rec, msg)
    new_marks = run.marks[len(old.marks) if old else 0 :]
    return replace(
        state,
        runs={**state.runs, env.run_id: run},
        order=state.order if old else (*state.order, env.run_id),
        marks=state.marks + new_marks,
        events_seen=index + 1,
        unknown_events=state.unknown_events + (msg is None),
        last_ns=t,
    )


def fold(records: Iterable[Recorded], state: State | None = None) -> State:
    state = state or State()
    for rec in records:
        state = evolve(state, rec)
    return state
