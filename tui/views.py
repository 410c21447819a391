"""What the TUI shows, as frozen dataclasses: the state the fold (tui/model.py) builds from events.

Frozen, and never mutated by the fold: an unchanged part of the state is the very same object
after an event, so a widget can skip redrawing by an identity check.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from services.core.events import Recorded

STEP_NAMES = ("profile", "retrieve", "candidates", "verdicts", "swap")
MAX_METRIC_POINTS = 600  # the serving timeline keeps this many ServerMetrics (about 10 min at 1/s)
VERDICTS = {-1: "rejected", 1: "correct", 2: "faster", 3: "fastest"}


@dataclass(frozen=True)
class Step:
    """One stage of a run's pipeline; times are envelope times (ns), 0 when not reached."""

    name: str
    status: str = "waiting"  # waiting | running | done | failed | skipped
    started_ns: int = 0
    ended_ns: int = 0
    reason: str = ""


@dataclass(frozen=True)
class TargetRow:
    class_path: str
    time_share: float
    measured_us: float
    floor_us: float
    recoverable_us: float
    op_family: str
    memory_bound: bool
    arithmetic_intensity: float
    achieved_fraction: float
    dtype_bytes: int
    supported: bool
    chosen: bool
    note: str


@dataclass(frozen=True)
class ProfileView:
    device: str
    device_name: str
    dtype: str
    peak_bytes_per_s: float
    calibrated: bool
    captured_time_us: float
    tokens_per_s: float
    time_source: str


@dataclass(frozen=True)
class CandidateView:
    candidate_id: str
    attempt: int = 0
    origin: str = ""
    origin_detail: str = ""  # the template config, or the skill it came from
    proposed: Recorded | None = None
    judged: Recorded | None = None
    reward: int | None = None
    checks: str = ""  # "passed/run"
    max_abs_err: float | None = None
    vs_eager: float | None = None
    vs_compile: float | None = None
    vs_native: float | None = None
    copy_fraction: float | None = None
    timed: bool = False
    rejection: str = ""
    swap: str = ""  # "" | "committed" | "rejected" | "rolled back"

    @property
    def verdict(self) -> str:
        if self.reward is None:
            return "judging"
        return VERDICTS.get(self.reward, f"reward {self.reward:+d}")


@dataclass(frozen=True)
class EventRow:
    index: int  # position in what the TUI has read, from 0
    seq: int
    run_id: str
    type: str
    producer: str
    time_ns: int
    known: bool
    summary: str
    rec: Recorded


@dataclass(frozen=True)
class Mark:
    """A swap or a rollback, placed on the serving timeline."""

    time_ns: int
    kind: str  # "swap" | "rollback"
    run_id: str
    label: str
    lineage: str = ""  # a swap's author and verdict (services.core.lineage), "" for a rollback


@dataclass(frozen=True)
class MetricPoint:
    time_ns: int
    server_id: str
    tokens_per_s: float
    p50_ms: float
    p95_ms: float
    requests: int
    active_swaps: int
    active_requests: int = 0
    batch_requests: int = 0
    waiting_requests: int = 0


def _initial_steps() -> tuple[Step, ...]:
    return tuple(Step(n) for n in STEP_NAMES)


@dataclass(frozen=True)
class RunView:
    run_id: str
    model: str = ""
    policy: str = ""
    requested_ns: int = 0
    updated_ns: int = 0
    status: str = "unknown"
    target_class: str = ""
    outcome: str = ""
    reward: int | None = None
    tokens_per_s_before: float = 0.0
    tokens_per_s_after: float = 0.0
    speedup: float = 0.0
    # Since schema 11: the served load before -> after at each level and the run's verdict (served_text.run_lines),
    # and whether any figure was worse beyond its interval
    served: tuple[str, ...] = ()
    served_worse: bool = False
    profile: ProfileView | None = None
    targets: tuple[TargetRow, ...] = ()
    steps: tuple[Step, ...] = field(default_factory=_initial_steps)
    candidates: tuple[CandidateView, ...] = ()
    marks: tuple[Mark, ...] = ()
    events: tuple[EventRow, ...] = ()
    unknown_events: int = 0

    @property
    def device(self) -> str:
        p = self.profile
        return (p.device_name or p.device) if p else "-"

    def step(self, name: str) -> Step:
        return self.steps[STEP_NAMES.index(name)]


@dataclass(frozen=True)
class State:
    runs: Mapping[str, RunView] = field(default_factory=dict)  # replaced, never mutated
    order: tuple[str, ...] = ()  # run ids in the order the TUI first saw them
    metrics: tuple[MetricPoint, ...] = ()
    marks: tuple[Mark, ...] = ()
    events_seen: int = 0
    unknown_events: int = 0
    last_ns: int = 0  # envelope time of the latest event seen
