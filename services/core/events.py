"""Envelopes, event types and subjects: the vocabulary every service shares."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from google.protobuf.message import DecodeError, Message

from services.core.pb import envelope_pb2, events_pb2

Envelope = envelope_pb2.Envelope
# 2: swap ids are unique per commit (`swap-<run>-<candidate>`); events written at 1 keep their own rule
# on replay (services.server.domain.swap_id_for), so old runs still verify.
# 3: candidates are data (kernel source + LaunchPlan, no host code), judged by the parent from the child's
# outputs; a verdict written at 2 or earlier re-derives by the reward rules of its time (services.judge.reward).
# 4: CandidateJudged.capabilities ("cuda-graph"), re-derived from the evidence of verdicts written at 4 on.
# 5: the profiler ranks a layer an op family rewrites (a gated MLP: its time outside the projections it keeps,
# from the server's per-child times and roles) and names every family's writable variants; runs written at 4 or
# earlier hold no roles, so their rankings re-derive as they were, and their reasons keep their words.
# 6: the residual-norm family (a decoder layer's residual add fused with its post norm) and the plain-MLP family
# (an ungated MLP's activation): the profiler ranks both layers and names their variants among the writable; a
# reason written at 5 keeps its words (its profiles recorded neither).
# 7: the RMSNorm that applies its weight in fp32 and rounds once (rmsnorm_fp32_weight, OLMo2's; and its residual
# norm) is recognised and named among the writable; a reason written at 6 keeps its words. Gated MLPs of one fused
# gate_up map are recorded with their two roles (a profile written before recorded no roles for them). The coder
# proposes a norm candidate dispatching by row count when two judged configs each lead one side of 64 rows; a
# search recorded at 6 re-derives without it.
# 8: the RoPE functions that rotate part of the head (rope_half_partial, GPT-NeoX's; rope_pairs_partial, GLM's) are
# recognised and named among the writable; a reason written at 7 keeps its words. A function's profile records its
# third operand's shape (`third_shape`: RoPE's cos, the rotary width last); one written before records none, and
# the judge draws cos as wide as the head for it.
# 9: Nemotron's ops are recognised and named among the writable: a plain MLP's relu² (mlp_relu2) and LayerNorm1P
# (layernorm_offset: torch's LayerNorm of 1 + weight, formed in the weight's dtype), alone and in a residual norm;
# a reason written at 8 keeps its words (a profile written before recorded them as nothing).
# 10: GPT-OSS's and GPT-J's RoPE (rope_half_angles, rope_pairs_angles: cos and sin of one angle a pair) are
# recognised and named among the writable, and so is the gated MLP of torch's exact GELU (geglu, recognised before,
# now written); a reason written at 9 keeps its words. A RoPE function of one tensor (Gemma 4's, GPT-J's) is
# profiled with its parameters' roles (`roles`: x as the wrapper's q, GPT-J's tensor as its x_seq_major), no k and
# its cos as the third operand; a profile written before held none.
# 11: a run's before/after is the served load (the profiler, a client of Generate, at 1, 16 and 64 streams on a GPU,
# 1 and 4 on a CPU: ProfileObservation.served_before, RunObservation.served_after), each figure judged by its own 95%
# interval over repeats (RunCompleted.served); a figure worse beyond it rolls the run's live swaps back (the
# profiler's RollbackRequested, an answer to the RunCompleted, re-derived on replay). A run whose profile holds no
# served figures (written at 10 or before) keeps its batch-1 decode figures read against the noise band.
# 12: the coder seeds a search from a recipe the skill store chose of a sibling template (a residual norm's for a
# norm, a gated MLP's for a plain one) by its launch shape, where the target's own search table holds that shape,
# origin "skill"; a run recorded before started those searches cold (origin "template"). A correct verdict's reason
# says its worst error as a share of the bound, not as an absolute error.
# 13: a swap its run's served verdict rolls back (the profiler's RollbackRequested: the served load worse after the
# run's swaps) is a losing pull of the skill behind it, as a kernel that raised while serving is; a rollback
# recorded before debited nothing and re-derives so.
SCHEMA_VERSION = 13

# Events that belong to a run's log (one stream), and the periodic metrics (another stream).
RUN_EVENT_NAMES = (
    "RunRequested",
    "ProfileCaptured",
    "SkillsRetrieved",
    "CandidateProposed",
    "CandidateJudged",
    "TargetConcluded",
    "SwapCommitted",
    "SwapRejected",
    "SwapRolledBack",
    "RollbackRequested",
    "SwapReapplied",
    "SkillPublished",
    "SkillCredited",
    "RunCompleted",
    "RunFailed",
    "RunCancelled",
)
METRIC_EVENT_NAMES = ("ServerMetrics",)
EVENT_TYPES: dict[str, type[Message]] = {
    name: getattr(events_pb2, name) for name in RUN_EVENT_NAMES + METRIC_EVENT_NAMES
}
# Events that end a run: it completed, or it cannot (a step could not be answered, or it was cancelled).
TERMINAL_EVENTS = ("RunCompleted", "RunFailed", "RunCancelled")
# A run stopped by one of these gets no further answers; an operator's rollback of a swap it made still does.
STOPPING_EVENTS = ("RunFailed", "RunCancelled")

RUNS_STREAM = "YANTRA_RUNS"
RUN_SUBJECTS = "yantra.run.>"
METRICS_STREAM = "YANTRA_METRICS"
METRICS_SUBJECTS = "yantra.metrics.>"
DLQ_STREAM = "YANTRA_DLQ"
DLQ_SUBJECTS = "yantra.dlq.>"

_TOKEN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_ID_NAMESPACE = uuid.UUID("6b1f1d39-2f4c-4f0e-9a57-5f7c0f5b9e11")


class BadEvent(ValueError):
    """A message on the bus that cannot be decoded or does not name a known event."""


def check_run_id(run_id: str) -> str:
    if not _TOKEN.match(run_id):
        raise ValueError(f"run id {run_id!r} must be 1-64 letters, digits, '-' or '_'")
    return run_id


def run_subject(run_id: str, type_name: str) -> str:
    return f"yantra.run.{check_run_id(run_id)}.{type_name}"


def run_filter(run_id: str = "*", type_name: str = ">") -> str:
    return f"yantra.run.{run_id}.{type_name}"


def metrics_subject(producer: str) -> str:
    return f"yantra.metrics.{producer}"


def dlq_subject(service: str) -> str:
    return f"yantra.dlq.{service}"


def derived_event_id(run_id: str, causation_id: str, type_name: str, ordinal: int) -> str:
    """The id of an event is a function of what it answers, so a re-emitted answer is a duplicate."""
    return str(uuid.uuid5(_ID_NAMESPACE, f"{run_id}/{causation_id}/{type_name}/{ordinal}"))


def type_name(msg: Message) -> str:
    name = msg.DESCRIPTOR.name
    if name not in EVENT_TYPES:
        raise BadEvent(f"{name} is not an event type")
    return name


def make_envelope(
    run_id: str,
    msg: Message,
    *,
    producer: str,
    time_ns: int,
    causation_id: str = "",
    ordinal: int = 0,
    event_id: str | None = None,
    answers: int = 0,
) -> Envelope:
    name = type_name(msg)
    return Envelope(
        event_id=event_id or derived_event_id(run_id, causation_id, name, ordinal),
        run_id=check_run_id(run_id),
        type=name,
        time_unix_ns=time_ns,
        producer=producer,
        causation_id=causation_id,
        correlation_id=run_id,
        payload=msg.SerializeToString(deterministic=True),
        schema_version=SCHEMA_VERSION,
        answers=answers,
    )


def encode(env: Envelope) -> bytes:
    return env.SerializeToString(deterministic=True)


def decode(data: bytes) -> Envelope:
    env = Envelope()
    try:
        env.ParseFromString(data)
    except DecodeError as exc:
        raise BadEvent(f"not an Envelope: {exc}") from exc
    if env.type not in EVENT_TYPES:
        raise BadEvent(f"unknown event type {env.type!r}")
    if not env.event_id or not env.run_id:
        raise BadEvent("envelope lacks event_id or run_id")
    unpack(env)  # the payload must parse too
    return env


def unpack(env: Envelope) -> Message:
    cls = EVENT_TYPES.get(env.type)
    if cls is None:
        raise BadEvent(f"unknown event type {env.type!r}")
    msg = cls()
    try:
        msg.ParseFromString(env.payload)
    except DecodeError as exc:
        raise BadEvent(f"{env.type} payload does not parse: {exc}") from exc
    return msg


@dataclass(frozen=True)
class Recorded:
    """An envelope as stored in the run stream, with its stream sequence."""

    seq: int
    env: Envelope

    @property
    def type(self) -> str:
        return self.env.type

    @property
    def msg(self) -> Message:
        return unpack(self.env)


def first(log: list[Recorded], type_name_: str) -> Recorded | None:
    return next((r for r in log if r.type == type_name_), None)


def last(log: list[Recorded], type_name_: str) -> Recorded | None:
    return next((r for r in reversed(log) if r.type == type_name_), None)


def all_of(log: list[Recorded], type_name_: str) -> list[Recorded]:
    return [r for r in log if r.type == type_name_]
