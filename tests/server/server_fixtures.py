"""Shared names for the server tests (a plain module: test files import it, conftest provides fixtures)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from candidate_files import plan_of

from services.core import events as ev
from services.core.kernels import candidate_sha256, candidate_wrapper
from services.core.pb import events_pb2 as pb

HERE = Path(__file__).resolve().parent
QWEN_NORM = "transformers.models.qwen2.modeling_qwen2.Qwen2RMSNorm"
LLAMA_NORM = "transformers.models.llama.modeling_llama.LlamaRMSNorm"


def load_candidate(candidate: Path | str, directory: Path | None = None):
    """The family wrapper running a candidate file's kernels (or a source's) by its plan: what the server serves."""
    source = candidate.read_text() if isinstance(candidate, Path) else candidate
    directory = directory or Path(tempfile.mkdtemp(prefix="yantra-test-kernels-"))
    return candidate_wrapper(directory, source, plan_of(source))


def rmsnorm_contract(target: str = QWEN_NORM) -> pb.Contract:
    return pb.Contract(
        kind="module_class",
        target=target,
        entrypoint="rmsnorm",  # the row_reduction family's wrapper
        inputs=["hidden_states"],
        bindings=[
            pb.Binding(param="weight", attr="weight", kind="tensor"),
            pb.Binding(param="eps", attr="variance_epsilon", kind="float"),
        ],
    )


def swap_run(
    run_id: str,
    source: str,
    *,
    reward: int = 1,
    run_min_reward: int = 1,
    judged_sha: str | None = None,
    swap: bool = True,
    contract: pb.Contract | None = None,
    capabilities: tuple[str, ...] = (),
    timing: pb.TimingEvidence | None = None,
) -> list[ev.Envelope]:
    """The envelopes a run holds when the server is asked to swap: request, proposal, verdict, conclusion.

    Each answers the one before it (causation ids), as the coder and judge would publish them.
    """
    plan = plan_of(source)
    sha = candidate_sha256(source, plan)
    cid = f"cand-{sha[:10]}"
    policy = pb.SwapPolicy(min_reward=1, name="cpu-untimed", reason="test: no GPU, correct kernels may swap")
    run_policy = pb.SwapPolicy(min_reward=run_min_reward, name="test", reason="the run's own policy")
    request = pb.RunRequested(model="tiny-qwen2", policy=run_policy, prompts=["Hello there"], decode_tokens=8)
    proposed = pb.CandidateProposed(
        candidate_id=cid,
        target_class=QWEN_NORM,
        source=source,
        source_sha256=sha,
        plan=plan,
        contract=contract or rmsnorm_contract(),
        origin="template",
        attempt=1,
    )
    judged = pb.CandidateJudged(
        candidate_id=cid, source_sha256=judged_sha or sha, reward=reward, reason="test", capabilities=capabilities
    )
    if timing is not None:  # the judge's figures per timed shape (what routes the swap: services.server.routing)
        judged.observed.timing.CopyFrom(timing)
    concluded = pb.TargetConcluded(
        target_class=QWEN_NORM,
        candidate_id=cid,
        source_sha256=sha,
        reward=reward,
        policy=policy,
        swap=swap,
        candidates_judged=1,
        reason="test",
    )
    out = [ev.make_envelope(run_id, request, producer="test", time_ns=1, event_id=f"req-{run_id}")]
    for producer, msg in (("coder", proposed), ("judge", judged), ("coder", concluded)):
        cause = out[-1].event_id
        out.append(ev.make_envelope(run_id, msg, producer=producer, time_ns=len(out) + 1, causation_id=cause))
    return out


def timed(*rows: tuple[str, float, float, float, float]) -> pb.TimingEvidence:
    """A verdict's timing: (shape, candidate GPU us, eager GPU us, candidate host us, eager host us) per shape."""
    return pb.TimingEvidence(
        measured=True,
        rows=[
            pb.TimingRow(shape=s, candidate_us=c, eager_us=e, candidate_host_us=ch, eager_host_us=eh)
            for s, c, e, ch, eh in rows
        ],
    )


def as_log(envelopes: list[ev.Envelope]) -> list[ev.Recorded]:
    return [ev.Recorded(seq, env) for seq, env in enumerate(envelopes, start=1)]


def good_observation(dtype: str = "float32") -> pb.ParityObservation:
    return pb.ParityObservation(
        modules_matched=5,
        activations_checked=20,
        activations_passed=20,
        max_abs_err=1e-7,
        tolerance=1e-4,
        static_ok=True,
        judged_ok=True,
        canary_tokens_before=[7] * 8,
        canary_tokens_after=[7] * 8,
        canary_logit_max_diff=1e-7,
        canary_logit_tolerance=1e-3,
        dtype=dtype,
    )


class Outcomes:
    """A stats observer keeping how requests ended."""

    def __init__(self):
        self.seen: list[str] = []

    def finished(self, outcome: str) -> None:
        self.seen.append(outcome)

    def generated(self, n: int) -> None: ...

    def first_token(self, seconds: float) -> None: ...

    def next_token(self, seconds: float) -> None: ...

    def swap_held(self, seconds: float) -> None: ...

    def latency(self, part: str, seconds: float) -> None: ...
