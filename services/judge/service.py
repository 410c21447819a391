"""The judge service: static check → contract → sandboxed correctness and timing → the verdict.

Layers run in order and stop at the first that fails; what ran is recorded in `observed`, per
layer (static findings, contract checks, the sandbox's walls and exit, correctness evidence,
timing rows with their baselines). Blocking work (the contract's meta build, the GPU probe) runs
in a thread and the sandbox is an asyncio subprocess, so the event loop keeps the JetStream
message in progress meanwhile.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import io
import logging
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from google.protobuf.message import Message

from services.core.candidate_check import check_candidate
from services.core.events import Recorded
from services.core.kernels import candidate_sha256
from services.core.pb import events_pb2 as pb
from services.judge import fenced_pass, gpu_health, identity, timing_check, verdict
from services.judge.cases import undrawn_boundaries
from services.judge.contract_check import check_contract, check_function_contract, check_layer_contract
from services.judge.domain import LiveTarget, derive_judged, live_target
from services.judge.module_factory import ModuleBuildError
from services.judge.sampled_grid import kind_of
from services.judge.sandbox import SandboxJob, SandboxLimits, run_job
from services.judge.verdict import BoundError
from services.ops import FAMILIES, family, judging
from services.ops.launch import stream_processors
from services.ops.protocol import JudgeAsk, operands_to_data

log = logging.getLogger(__name__)

GPU_TIMEOUT_S = 300.0
CPU_TIMEOUT_S = 600.0
CPU_MAX_ROWS = 8  # the Triton interpreter is slow: the live shape's rows are capped on CPU
GPU_EXAMPLES, CPU_EXAMPLES = 48, 12  # hypothesis draws beyond the fixed cases (the interpreter runs ~10 ms a row)


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
        examples: int | None = None,
        limits: SandboxLimits | None = None,
        judge_id: str = "",
        fenced: bool | None = None,
        fenced_sms: int | None = None,
    ):
        self.use_gpu = resolve_gpu(device)
        # A GPU judging also runs its cases fenced under the interpreter (services.judge.fenced_pass); a CPU judging
        # is fenced itself. `fenced=True` on a CPU adds the pass all the same (tests of the pass).
        self.fenced = self.use_gpu if fenced is None else fenced
        # the program count of a persistent grid in the fenced pass: the GPU's own, so the interpreted launch is its
        if fenced_sms is None:
            fenced_sms = stream_processors(torch.device("cuda", 0)) if self.use_gpu else 0
        self.fenced_sms = fenced_sms
        self.judge_id = judge_id  # which of many judges (services.judge.identity): recorded in every verdict
        self.device = identity.device_label(
            self.use_gpu, os.environ.get("CUDA_VISIBLE_DEVICES"), torch.cuda.get_device_name(0) if self.use_gpu else ""
        )
        self.timeout_s = timeout_s or (GPU_TIMEOUT_S if self.use_gpu else CPU_TIMEOUT_S)
        self.limits = limits or SandboxLimits.from_env(self.timeout_s)
        self.scratch_dir = scratch_dir
        self.examples = examples if examples is not None else (GPU_EXAMPLES if self.use_gpu else CPU_EXAMPLES)

    async def handle(self, trigger: Recorded, prior: list[Recorded]) -> list[Message]:
        started = time.monotonic()
        observed = await self.observe(prior, trigger.msg)
        observed.wall_s = time.monotonic() - started
        observed.judge_id, observed.device = self.judge_id, self.device
        judged = derive_judged(prior, trigger, observed)
        log.info("judge %s: %s reward %+d: %s", self.judge_id, judged.candidate_id, judged.reward, judged.reason)
        return [judged]

    async def observe(self, prior: list[Recorded], proposal: pb.CandidateProposed) -> pb.JudgeObservation:
        obs = pb.JudgeObservation()
        static = check_candidate(proposal.source, proposal.plan)
        if candidate_sha256(proposal.source, proposal.plan) != proposal.source_sha256:  # judged is what was hashed
            static.passed = False
            static.rules_checked.append("source-hash")
            static.findings.insert(
                0, pb.Finding(rule_id="source-hash", reason="source_sha256 is not the hash of the source and plan")
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
        ops = family(proposal.plan.family)
        contract = await asyncio.to_thread(family_contract, ops, proposal.contract, target.introspection)
        obs.contract.CopyFrom(contract)
        if not contract.passed:
            return obs

        cpu_limit = judging(proposal.plan.family).CPU_BOUNDARY
        undrawn = undrawn_boundaries([launch.max_rows for launch in proposal.plan.launches], self.use_gpu, cpu_limit)
        if undrawn:
            obs.correctness.CopyFrom(pb.CorrectnessEvidence(passed=False, error=undrawn, rule_id="boundary-undrawn"))
            return obs
        try:
            prepared = await asyncio.to_thread(self.prepare, proposal, target)
        except (ModuleBuildError, BoundError) as exc:  # the contract passed, so this is the judge's; still a verdict
            obs.correctness.CopyFrom(unprepared(exc))
            return obs

        fencing = asyncio.create_task(self.fenced_pass(proposal, target)) if self.fenced else None

        async def fence_holds() -> bool:  # timing waits for the fenced pass: nothing is timed that it rejects
            return fencing is None or fenced_pass.passed(await asyncio.shield(fencing))

        try:
            outcome, correctness = await self.run(prepared, self.use_gpu, self.limits, fence_holds)
        except BaseException:  # cancelled, or the judge's own failure: the fenced child goes with it
            if fencing is not None:
                fencing.cancel()
                await asyncio.gather(fencing, return_exceptions=True)
            raise
        if fencing is not None:  # recorded even when the main pass failed
            obs.fenced.CopyFrom(await fencing)
        obs.correctness.CopyFrom(correctness)
        obs.timing.CopyFrom(outcome.timing)
        obs.sandbox.CopyFrom(outcome.sandbox)
        # The GPU must still be sane after the child, or nothing it measured is believed.
        obs.sandbox.gpu_health = await gpu_health.probe() if self.use_gpu else "no GPU"
        if self.use_gpu and outcome.timing.measured:
            checked = await asyncio.to_thread(
                timing_check.check, outcome.timing, outcome.sandbox, prepared.itemsizes, proposal.plan.family
            )
            obs.timing_check.CopyFrom(checked)
        return obs

    async def run(self, prepared: Prepared, gpu: bool, limits: SandboxLimits, also=None):
        """(the sandbox's outcome, the correctness evidence) of one child over `prepared`'s cases. The child goes on
        to timing (a GPU) or to its re-check (a CPU) once its first pass is right and `also()`, when given, agrees."""

        held = False  # stopped after a right first pass because `also()` said no: judged on that pass alone

        async def go_ahead(outputs: bytes, facts: dict) -> bool:
            nonlocal held
            first = await asyncio.to_thread(
                verdict.judge_outputs, prepared.cases, prepared.refs, facts, outputs, first_pass=True
            )
            if first.error:
                return False
            held = also is not None and not await also()
            return not held

        outcome = await run_job(
            prepared.job, limits, use_gpu=gpu, cases=prepared.blob, scratch_parent=self.scratch_dir, go_ahead=go_ahead
        )
        tally = await asyncio.to_thread(verdict.judge_outputs, prepared.cases, prepared.refs, outcome.facts,
                                        outcome.outputs, first_pass=held)  # fmt: skip
        evidence = verdict.evidence(
            tally,
            prepared.cases,
            seed_base=prepared.job.seed_base,
            dtype=prepared.job.input_dtype,
            facts=outcome.facts,
            interpreted=not gpu,
        )
        return outcome, evidence

    async def fenced_pass(self, proposal: pb.CandidateProposed, target: LiveTarget) -> pb.FencedPass:
        """The candidate's cases as the CPU judge draws them, run under the interpreter with every tensor against
        inaccessible memory (services.judge.fenced_pass): a read past a tensor faults (`memory-fault`)."""
        started = time.monotonic()
        plan, note = fenced_pass.lowered(proposal.plan, judging(proposal.plan.family).CPU_BOUNDARY)
        fenced = pb.CandidateProposed()
        fenced.CopyFrom(proposal)
        fenced.plan.CopyFrom(plan)
        out = pb.FencedPass(lowered=note)
        # the GPU judging draws the served range whole on the GPU's own fence: no sampled range here too
        unbounded = dataclasses.replace(target, max_rows=0, max_positions=0)
        try:
            prepared = await asyncio.to_thread(self.prepare, fenced, unbounded, gpu=False)
        except (ModuleBuildError, BoundError) as exc:
            out.correctness.CopyFrom(unprepared(exc))
        else:
            outcome, correctness = await self.run(prepared, False, self.limits)
            out.correctness.CopyFrom(correctness)
            out.sandbox.CopyFrom(outcome.sandbox)
        out.wall_s = time.monotonic() - started
        return out

    def prepare(self, proposal: pb.CandidateProposed, target: LiveTarget, *, gpu: bool | None = None) -> Prepared:
        """The job, the cases drawn fresh, and their references: computed here, before the child exists, by the
        candidate's op family (services.ops.<family>.judging) from the live target. `gpu`: draw for that device
        (the judge's own by default; the fenced pass draws a CPU judging's cases on a GPU judge)."""
        gpu = self.use_gpu if gpu is None else gpu
        examples = self.examples if gpu == self.use_gpu else CPU_EXAMPLES
        ask = JudgeAsk(proposal, target, gpu, examples, secrets.randbelow(1 << 30) + 1, CPU_MAX_ROWS)
        drawn = judging(proposal.plan.family).prepare(ask)
        job = SandboxJob(
            source=proposal.source,
            contract=proposal.contract.SerializeToString(deterministic=True),
            plan=proposal.plan.SerializeToString(deterministic=True),
            class_path=target.introspection.class_path,
            width=drawn.width,
            eps=drawn.eps,
            eps_attr=drawn.eps_attr,
            param_dtype=drawn.param_dtype,
            input_dtype=drawn.input_dtype,
            live_shape=list(drawn.live_shape),
            device="cuda" if gpu else "cpu",
            seed_base=ask.seed_base,
            family=proposal.plan.family,
            variant=target.computes,
            second_shape=list(target.second_shape),
            third_shape=list(target.third_shape),
            sms=self.fenced_sms if not gpu else 0,
            sampled={i: kind for i, case in enumerate(drawn.cases) if (kind := kind_of(case.name))},
        )
        blob = io.BytesIO()
        torch.save(operands_to_data(drawn.operands), blob)
        return Prepared(job, drawn.cases, drawn.refs, blob.getvalue(), drawn.itemsizes)


def unprepared(exc: ModuleBuildError | BoundError) -> pb.CorrectnessEvidence:
    """The verdict's evidence when the cases could not be prepared (the judge's own bound, or the module not built)."""
    rule = "judge-bound" if isinstance(exc, BoundError) else "raised"
    return pb.CorrectnessEvidence(passed=False, error=str(exc), rule_id=rule)


@dataclass(frozen=True)
class Prepared:
    job: SandboxJob
    cases: list
    refs: list
    blob: bytes
    itemsizes: tuple[int, int, int]  # input, weight, output


# Families whose cases, oracle and baselines the judge has (a `judging` module): a plan of another family is refused
# at the contract, never run against another op's oracle.
JUDGED_FAMILIES = tuple(name for name in FAMILIES if importlib.util.find_spec(f"services.ops.{name}.judging"))


def family_contract(ops, contract: pb.Contract, intro: pb.ModuleIntrospection) -> pb.ContractEvidence:
    """The contract against the live class and its op family's wrapper (the family's signature, not an author's)."""
    if ops.FAMILY not in JUDGED_FAMILIES:
        return pb.ContractEvidence(
            passed=False,
            rule_id="contract-kind",
            error=f"the judge has no cases or oracle for op family {ops.FAMILY!r} yet (it judges "
            f"{', '.join(JUDGED_FAMILIES)})",
        )
    kind = ops.KIND
    if contract.kind != kind:
        return pb.ContractEvidence(
            passed=False,
            rule_id="contract-kind",
            error=f"a {ops.FAMILY} candidate plugs in as a {kind!r} contract, not {contract.kind!r}",
        )
    if contract.entrypoint != ops.ENTRYPOINT:
        return pb.ContractEvidence(
            passed=False,
            rule_id="entry-signature",
            error=f"the contract's entrypoint {contract.entrypoint!r} is not the {ops.FAMILY} wrapper "
            f"{ops.ENTRYPOINT!r}",
        )
    if kind == "layer":
        return check_layer_contract(contract, intro, ops)
    if kind == "function":
        return check_function_contract(contract, intro, ops)
    return check_contract(contract, intro, list(ops.ENTRY_PARAMS), dict(ops.PARAM_KINDS), ops.OPTIONAL_PARAMS)
