"""The judge's derivations, pure: where the live target's facts come from, and the verdict from evidence.

Everything the judge measured (static findings, contract checks, the sandbox's walls and exit,
correctness, timing, wall time) is in `CandidateJudged.observed`; the reward, reason and
speedups are re-derived from it.
"""

from __future__ import annotations

from google.protobuf.message import Message

from services.core import events as ev
from services.core.events import Recorded
from services.core.kernels import candidate_sha256
from services.core.pb import events_pb2 as pb
from services.core.replay import Rederive
from services.judge.reward import capabilities, judge_reward
from services.ops.protocol import LiveTarget  # the seam's type: a family prepares its judging from it


def live_target(prior: list[Recorded], target_class: str) -> LiveTarget | None:
    captured = ev.last(prior, "ProfileCaptured")
    if captured is None:
        return None
    observed = captured.msg.observed
    for module in observed.modules:
        if module.introspection.class_path == target_class:
            dtype = module.dtype or observed.dtype
            return LiveTarget(
                module.introspection,
                tuple(module.input_shape),
                dtype,
                module.computes,
                tuple(module.second_shape),
                tuple(module.third_shape),
                tuple(module.widths),
                observed.max_rows_per_call,
                observed.max_positions,
                observed.max_batch,
                tuple(module.live_parameters),
                module.live_parameter_sets,
            )
    return None


def derive_judged(prior: list[Recorded], trigger: Recorded, observed: pb.JudgeObservation) -> pb.CandidateJudged:
    """The verdict on the CandidateProposed `trigger`, from what the judge observed."""
    proposal = trigger.msg
    if not isinstance(proposal, pb.CandidateProposed):
        raise ValueError(f"the judge answers CandidateProposed, not {trigger.type}")
    # Since schema 3 the parent checks the child's timing itself; a verdict of an earlier schema keeps its rules.
    parent_checks_timing = trigger.env.schema_version >= 3
    version = trigger.env.schema_version
    reward, reason, vs_eager, vs_best = judge_reward(
        observed, parent_checks_timing=parent_checks_timing, graphs_hide_the_host=version >= 5,
        error_of_bound=version >= 12,
    )  # fmt: skip
    able = capabilities(observed) if trigger.env.schema_version >= 4 and reward >= 1 else []
    return pb.CandidateJudged(
        capabilities=able,
        candidate_id=proposal.candidate_id,
        source_sha256=candidate_sha256(proposal.source, proposal.plan),  # what was judged, not what was claimed
        observed=observed,
        reward=reward,
        reason=reason,
        speedup_vs_eager=vs_eager,
        speedup_vs_best=vs_best,
    )


def _rederive(prior: list[Recorded], trigger: Recorded, recorded: Message, ordinal: int = 0) -> Message:
    return derive_judged(prior, trigger, recorded.observed)


REDERIVE: dict[str, Rederive] = {"CandidateJudged": _rederive}
