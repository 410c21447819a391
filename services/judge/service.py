"""The judge service: static check → contract → sandboxed correctness and timing → the verdict.

Layers run in order and stop at the first that fails; what ran is recorded in `observed`, per
layer (static findings, contract checks, the sandbox's walls and exit, correctness evidence,
timing rows with their baselines). Blocking work (the contract's meta build, the GPU probe) runs
in a thread and the sandbox is an asyncio subprocess, so the event loop keeps the JetStream
message in progress meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from google.protobuf.message import Message

from services.core.events import Recorded
from services.core.kernels import sha256
from services.core.pb import events_pb2 as pb
from services.judge import gpu_health
from services.judge.contract_check import check_candidate_contract
from services.judge.domain import LiveTarget, derive_judged, live_target
from services.judge.module_factory import ModuleBuildError, float_binding, width_and_eps
from services.judge.sandbox import SandboxJob, SandboxLimits, run_job
from services.judge.static_check import check_source

log = logging.getLogger(__name__)

GPU_TIMEOUT_S = 300.0
CPU_TIMEOUT_S = 600.0
CPU_MAX_ROWS = 8  # the Triton interpreter is slow: the live shape's rows are capped on CPU


def resolve_gpu(device: str) -> bool:
    """Whether to judge on a GPU: settings.device "auto" | "cuda" | "cpu"."""
    if device == "cpu":
        return False
    import torch

    available = torch.cuda.is_available()
    if device.startswith("cuda") and not available:
        raise ValueError("YANTRA_DEVICE asks for cuda but no CUDA GPU is visible to the judge")
    return available


class JudgeService:
    name = "judge"
    consumes = ("CandidateProposed",)

    def __init__(
        self,
        *,
        device: str = "auto",
        timeout_s: float | None = None,
        scratch_dir: Path | None = None,
        seeds: int = 5,
        limits: SandboxLimits | None = None,
    ):
        self.use_gpu = resolve_gpu(device)
        self.timeout_s = timeout_s or (GPU_TIMEOUT_S if self.use_gpu else CPU_TIMEOUT_S)
        self.limits = limits or SandboxLimits.from_env(self.timeout_s)
        self.scratch_dir = scratch_dir
        self.seeds = seeds

    async def handle(self, trigger: Recorded, prior: list[Recorded]) -> list[Message]:
        started = time.monotonic()
        observed = await self.observe(prior, trigger.msg)
        observed.wall_s = time.monotonic() - started
        judged = derive_judged(prior, trigger, observed)
        log.info("judge: %s reward %+d: %s", judged.candidate_id, judged.reward, judged.reason)
        return [judged]

    async def observe(self, prior: list[Recorded], proposal: pb.CandidateProposed) -> pb.JudgeObservation:
        obs = pb.JudgeObservation()
        static = check_source(proposal.source, proposal.contract)
        if sha256(proposal.source) != proposal.source_sha256:  # judged is what was hashed, or nothing
            static.passed = False
            static.rules_checked.append("source-hash")
            static.findings.insert(
                0, pb.Finding(rule_id="source-hash", reason="source_sha256 is not the hash of the source")
            )
        obs.static_check.CopyFrom(static)
        if not static.passed:
            return obs

        target = live_target(prior, proposal.target_class)
        if target is None:
            obs.contract.CopyFrom(
                pb.ContractEvidence(passed=False, error=f"no ProfileCaptured introspection of {proposal.target_class}")
            )
            return obs
        contract = await asyncio.to_thread(
            check_candidate_contract, proposal.source, proposal.contract, target.introspection
        )
        obs.contract.CopyFrom(contract)
        if not contract.passed:
            return obs

        try:
            job = self.job(proposal, target)
        except ModuleBuildError as exc:  # the contract passed, so this is unexpected; still a verdict
            obs.correctness.CopyFrom(pb.CorrectnessEvidence(passed=False, error=str(exc)))
            return obs
        outcome = await run_job(job, self.limits, use_gpu=self.use_gpu, scratch_parent=self.scratch_dir)
        obs.correctness.CopyFrom(outcome.correctness)
        obs.timing.CopyFrom(outcome.timing)
        obs.sandbox.CopyFrom(outcome.sandbox)
        # The GPU must still be sane after the child, or nothing it measured is believed.
        obs.sandbox.gpu_health = await gpu_health.probe() if self.use_gpu else "no GPU"
        return obs

    def job(self, proposal: pb.CandidateProposed, target: LiveTarget) -> SandboxJob:
        intro = target.introspection
        width, eps = width_and_eps(intro, proposal.contract)
        eps_binding = float_binding(proposal.contract)
        attrs = {a.name: a for a in intro.attributes}
        weight_attr = next((b.attr for b in proposal.contract.bindings if b.kind == "tensor"), "")
        input_dtype = target.dtype or "float32"
        param_dtype = attrs[weight_attr].dtype if weight_attr in attrs and attrs[weight_attr].dtype else input_dtype
        return SandboxJob(
            source=proposal.source,
            contract=proposal.contract.SerializeToString(deterministic=True),
            class_path=intro.class_path,
            width=width,
            eps=eps,
            eps_attr=eps_binding.attr if eps_binding else None,
            param_dtype=param_dtype,
            input_dtype=input_dtype,
            live_shape=list(target.input_shape),
            device="cuda" if self.use_gpu else "cpu",
            seeds=self.seeds,
            max_rows=0 if self.use_gpu else CPU_MAX_ROWS,
        )
