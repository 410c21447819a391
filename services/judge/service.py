"""The judge service: static check → contract → sandboxed correctness and timing → the verdict.

Layers run in order and stop at the first that fails; what ran is recorded in `observed`, per
layer (static findings, contract checks, the sandbox's walls and exit, correctness evidence,
timing rows with their baselines). Blocking work (the contract's meta build, the GPU probe) runs
in a thread and the sandbox is an asyncio subprocess, so the event loop keeps the JetStream
message in progress meanwhile.
"""

from __future__ import annotations

import asyncio
import io
import logging
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
from services.judge import gpu_health, timing_check, verdict
from services.judge.add_norm_cases import draw_add_norm_cases
from services.judge.cases import CPU_BOUNDARY_ROWS, CaseSpec, draw_cases, undrawn_boundaries
from services.judge.contract_check import check_contract, check_function_contract, check_layer_contract
from services.judge.domain import LiveTarget, derive_judged, live_target
from services.judge.module_factory import (
    ModuleBuildError,
    build,
    float_binding,
    import_class,
    import_function,
    module_state_attrs,
    torch_dtype,
    width_and_eps,
)
from services.judge.pair_cases import PairSpec, draw_pair_cases
from services.judge.rope_cases import (
    CPU_BOUNDARY_POSITIONS,
    RopeSpec,
    draw_rope_cases,
    one_tensor_form,
    rope_references,
)
from services.judge.sandbox import SandboxJob, SandboxLimits, run_job
from services.judge.verdict import BoundError
from services.ops import family, gated_mlp, plain_mlp, residual_norm, rotary, row_reduction

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
    ):
        self.use_gpu = resolve_gpu(device)
        self.timeout_s = timeout_s or (GPU_TIMEOUT_S if self.use_gpu else CPU_TIMEOUT_S)
        self.limits = limits or SandboxLimits.from_env(self.timeout_s)
        self.scratch_dir = scratch_dir
        self.examples = examples if examples is not None else (GPU_EXAMPLES if self.use_gpu else CPU_EXAMPLES)

    async def handle(self, trigger: Recorded, prior: list[Recorded]) -> list[Message]:
        started = time.monotonic()
        observed = await self.observe(prior, trigger.msg)
        observed.wall_s = time.monotonic() - started
        judged = derive_judged(prior, trigger, observed)
        log.info("judge: %s reward %+d: %s", judged.candidate_id, judged.reward, judged.reason)
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

        cpu_limit = CPU_BOUNDARY_POSITIONS if proposal.plan.family == rotary.FAMILY else CPU_BOUNDARY_ROWS
        undrawn = undrawn_boundaries([launch.max_rows for launch in proposal.plan.launches], self.use_gpu, cpu_limit)
        if undrawn:
            obs.correctness.CopyFrom(pb.CorrectnessEvidence(passed=False, error=undrawn, rule_id="boundary-undrawn"))
            return obs
        try:
            prepared = await asyncio.to_thread(self.prepare, proposal, target)
        except (ModuleBuildError, BoundError) as exc:  # the contract passed, so this is the judge's; still a verdict
            rule = "judge-bound" if isinstance(exc, BoundError) else "raised"
            obs.correctness.CopyFrom(pb.CorrectnessEvidence(passed=False, error=str(exc), rule_id=rule))
            return obs

        async def go_ahead(outputs: bytes, facts: dict) -> bool:  # the first pass right? then time it
            first = await asyncio.to_thread(
                verdict.judge_outputs, prepared.cases, prepared.refs, facts, outputs, first_pass=True
            )
            return not first.error

        outcome = await run_job(
            prepared.job, self.limits, use_gpu=self.use_gpu, cases=prepared.blob, scratch_parent=self.scratch_dir,
            go_ahead=go_ahead,
        )  # fmt: skip
        tally = await asyncio.to_thread(verdict.judge_outputs, prepared.cases, prepared.refs, outcome.facts,
                                        outcome.outputs)  # fmt: skip
        obs.correctness.CopyFrom(
            verdict.evidence(
                tally,
                prepared.cases,
                seed_base=prepared.job.seed_base,
                dtype=prepared.job.input_dtype,
                facts=outcome.facts,
                interpreted=not self.use_gpu,
            )  # fmt: skip
        )
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

    def prepare(self, proposal: pb.CandidateProposed, target: LiveTarget) -> Prepared:
        """The job, the cases drawn fresh, and their references: computed here, before the child exists."""
        if proposal.plan.family == gated_mlp.FAMILY:
            return self.prepare_pairs(proposal, target)
        if proposal.plan.family == rotary.FAMILY:
            return self.prepare_rope(proposal, target)
        if proposal.plan.family == residual_norm.FAMILY:
            return self.prepare_add_norm(proposal, target)
        if proposal.plan.family == plain_mlp.FAMILY:
            return self.prepare_unary(proposal, target)
        intro = target.introspection
        width, eps = width_and_eps(intro, proposal.contract)
        eps_binding = float_binding(proposal.contract)
        weight_attr, bias_attr = module_state_attrs(intro, proposal.contract)
        attrs = {a.name: a for a in intro.attributes}
        input_dtype = target.dtype or "float32"
        param_dtype = attrs[weight_attr].dtype if weight_attr in attrs and attrs[weight_attr].dtype else input_dtype
        seed_base = secrets.randbelow(1 << 30) + 1
        job = SandboxJob(
            source=proposal.source,
            contract=proposal.contract.SerializeToString(deterministic=True),
            plan=proposal.plan.SerializeToString(deterministic=True),
            class_path=intro.class_path,
            width=width,
            eps=eps,
            eps_attr=eps_binding.attr if eps_binding else None,
            param_dtype=param_dtype,
            input_dtype=input_dtype,
            live_shape=list(target.input_shape),
            device="cuda" if self.use_gpu else "cpu",
            seed_base=seed_base,
        )
        spec = CaseSpec(
            width=width,
            live_shape=tuple(target.input_shape) or (1, width),
            input_dtype=torch_dtype(input_dtype),
            param_dtype=torch_dtype(param_dtype),
            gpu=self.use_gpu,
            max_rows=0 if self.use_gpu else CPU_MAX_ROWS,
            row_blocks=row_blocks(proposal.plan),
            examples=self.examples,
            boundaries=tuple(launch.max_rows for launch in proposal.plan.launches if launch.max_rows),
            bias=bias_attr is not None,  # the module's, bound or not: a contract dropping it reads no bias
            widths=target.widths,
            domain_rows=target.max_rows,
        )
        cases = draw_cases(spec, seed_base)
        cls = import_class(intro.class_path)
        eps_attr = eps_binding.attr if eps_binding else None
        refs = verdict.references(cases, lambda w: build(cls, w, eps, eps_attr, "cpu"), weight_attr, bias_attr)
        blob = io.BytesIO()
        data = {"bases": [c.base for c in cases], "weights": [c.weight for c in cases]}
        data["state_attrs"] = [weight_attr, bias_attr or ""]  # the child sets them by the module's own names too
        if bias_attr is not None:
            data["biases"] = [c.bias for c in cases]
        torch.save({**data, "layouts": [c.layout for c in cases]}, blob)
        x, w = spec.input_dtype, spec.param_dtype
        return Prepared(job, cases, refs, blob.getvalue(), (x.itemsize, w.itemsize, torch.promote_types(x, w).itemsize))

    def _op_job(self, proposal: pb.CandidateProposed, target: LiveTarget, width: int, live) -> SandboxJob:
        """The sandbox job of an op whose oracle is torch's or the live function's (no module state, no eps), with a
        fresh seed: its family and the variant the server saw computed name the oracle."""
        dtype = target.dtype or "float32"
        return SandboxJob(
            source=proposal.source,
            contract=proposal.contract.SerializeToString(deterministic=True),
            plan=proposal.plan.SerializeToString(deterministic=True),
            class_path=target.introspection.class_path,
            width=width,
            eps=None,
            eps_attr=None,
            param_dtype=dtype,
            input_dtype=dtype,
            live_shape=list(live),
            device="cuda" if self.use_gpu else "cpu",
            seed_base=secrets.randbelow(1 << 30) + 1,
            family=proposal.plan.family,
            variant=target.computes,
            second_shape=list(target.second_shape),
            third_shape=list(target.third_shape),
        )

    def prepare_pairs(self, proposal: pb.CandidateProposed, target: LiveTarget) -> Prepared:
        """A gated MLP's: (gate, up) operand pairs of the live intermediate width, torch's act(gate) * up as the
        oracle (the variant the server saw the module compute). On a GPU the served row range too (the operands
        carry the hidden rows); no other widths: the profile's are hidden widths, not intermediate ones."""
        intro = target.introspection
        children = {c.name: tuple(c.shape) for c in intro.children}
        shapes = {b.param: children.get(b.attr, ()) for b in proposal.contract.bindings}
        width = gated_mlp.intermediate_width(shapes)
        if target.computes not in gated_mlp.VARIANTS:
            raise ModuleBuildError(f"the profile does not say which activation {intro.class_path} computes")
        dtype = target.dtype or "float32"
        live = tuple(target.input_shape)[:-1] + (width,) if target.input_shape else (1, width)
        job = self._op_job(proposal, target, width, live)
        blocks = tuple(gated_mlp.parse_grid(launch.grid) for launch in proposal.plan.launches)
        spec = PairSpec(
            width, live, torch_dtype(dtype), self.use_gpu, blocks, examples=self.examples // 2,
            domain_rows=target.max_rows,  # the operands' rows are the hidden rows: the served range of them
        )  # fmt: skip
        cases = draw_pair_cases(spec, job.seed_base)
        refs = verdict.pair_references(cases, target.computes)
        blob = io.BytesIO()
        torch.save({"gates": [c.gate for c in cases], "ups": [c.up for c in cases],
                    "layouts": [c.layout for c in cases]}, blob)  # fmt: skip
        size = torch_dtype(dtype).itemsize
        return Prepared(job, cases, refs, blob.getvalue(), (size, size, size))

    def prepare_unary(self, proposal: pb.CandidateProposed, target: LiveTarget) -> Prepared:
        """A plain MLP's activation: single operands of the live intermediate width (the gated pair's gates), torch's
        own formula as the oracle (the variant the server saw the module compute). On a GPU the served row range
        too; no other widths (the profile's are hidden widths, not intermediate ones)."""
        intro = target.introspection
        if target.computes not in plain_mlp.VARIANTS:
            raise ModuleBuildError(f"the profile does not say which activation {intro.class_path} computes")
        children = {c.name: tuple(c.shape) for c in intro.children}
        shapes = {b.param: children.get(b.attr, ()) for b in proposal.contract.bindings}
        hidden = int(target.input_shape[-1]) if target.input_shape else 0
        if not hidden or plain_mlp.roles_problem(shapes):
            raise ModuleBuildError(f"the profile records no input shape or no fc and proj maps of {intro.class_path}")
        width = plain_mlp.intermediate_width(shapes, hidden)
        dtype = target.dtype or "float32"
        live = tuple(target.input_shape)[:-1] + (width,)
        job = self._op_job(proposal, target, width, live)
        blocks = tuple(plain_mlp.parse_grid(launch.grid) for launch in proposal.plan.launches)
        spec = PairSpec(
            width, live, torch_dtype(dtype), self.use_gpu, blocks, examples=self.examples // 2,
            domain_rows=target.max_rows,  # the operands' rows are the hidden rows: the served range of them
        )  # fmt: skip
        cases = draw_pair_cases(spec, job.seed_base)
        refs = verdict.unary_references(cases, target.computes)
        blob = io.BytesIO()
        torch.save({"operands": [c.gate for c in cases], "layouts": [c.layout for c in cases]}, blob)
        size = torch_dtype(dtype).itemsize
        return Prepared(job, cases, refs, blob.getvalue(), (size, size, size))

    def prepare_add_norm(self, proposal: pb.CandidateProposed, target: LiveTarget) -> Prepared:
        """A decoder layer's residual norm: (attention output, residual) pairs of the live hidden width with the
        norm's weight (and bias) and an epsilon per case, torch's add then the post norm's formula as the oracle
        (the variant the server saw the layer compute). Its plan is the norm family's row plan: both sides of each
        row dispatch limit and every residue of its rows per program are drawn, as are the class's other hidden
        widths and, on a GPU, the served row range."""
        intro = target.introspection
        if target.computes not in residual_norm.VARIANTS:
            raise ModuleBuildError(f"the profile does not say which norm {intro.class_path} computes after its add")
        dtype = target.dtype or "float32"
        live = tuple(target.input_shape)
        width = int(live[-1]) if live else 0
        if not width:
            raise ModuleBuildError(f"the profile recorded no input shape of {intro.class_path}")
        job = self._op_job(proposal, target, width, live)
        spec = PairSpec(
            width, live, torch_dtype(dtype), self.use_gpu, (), examples=self.examples // 2,
            boundaries=tuple(launch.max_rows for launch in proposal.plan.launches if launch.max_rows),
            row_blocks=row_blocks(proposal.plan), widths=target.widths, domain_rows=target.max_rows,
        )  # fmt: skip
        bias = residual_norm.norm_variant(target.computes) in row_reduction.BIASED
        cases = draw_add_norm_cases(spec, job.seed_base, bias)
        refs = verdict.add_norm_references(cases, target.computes)
        blob = io.BytesIO()
        torch.save(
            {
                "actives": [c.pair.gate for c in cases],
                "residuals": [c.pair.up for c in cases],
                "weights": [c.weight for c in cases],
                "biases": [c.bias for c in cases] if bias else [],
                "epsilons": [c.eps for c in cases],
                "layouts": [c.layout for c in cases],
            },
            blob,
        )
        size = torch_dtype(dtype).itemsize
        return Prepared(job, cases, refs, blob.getvalue(), (size, size, size))

    def prepare_rope(self, proposal: pb.CandidateProposed, target: LiveTarget) -> Prepared:
        """A rotary function's: (q, k, cos, sin) sets at the live head dim, the live function itself as the oracle
        (imported here, run in the live dtype and in float64)."""
        path = target.introspection.class_path
        _, fn = import_function(path)
        if target.computes not in rotary.VARIANTS:
            raise ModuleBuildError(f"the profile does not say which rotary layout {path} computes")
        dtype = target.dtype or "float32"
        live = rotary.heads_major(target.input_shape, target.third_shape)  # q as (batch, heads, seq, head_dim)
        job = self._op_job(proposal, target, int(live[-1]) if live else 0, live)
        rotary_dim = rotary.live_rotary_dim(target.third_shape, int(live[-1])) if live else 0
        one = rotary.one_tensor(proposal.contract)  # the contract check found the function's roles so
        spec = RopeSpec(
            live, torch_dtype(dtype), self.use_gpu, examples=max(2, self.examples // 4), rotary_dim=rotary_dim,
            boundaries=tuple(launch.max_rows for launch in proposal.plan.launches if launch.max_rows),
            one_tensor=one, max_positions=target.max_positions, max_batch=target.max_batch,
        )  # fmt: skip
        cases = draw_rope_cases(spec, target.computes, job.seed_base)
        refs = rope_references(cases, one_tensor_form(fn, proposal.contract))
        blob = io.BytesIO()
        torch.save(
            {
                "sets": [[c.q, c.k, c.cos, c.sin] for c in cases],
                "heads": [[c.shape[1], c.heads_k] for c in cases],
                "dims": [c.shape[3] for c in cases],
                "layouts": [c.layout for c in cases],
            },
            blob,
        )
        size = torch_dtype(dtype).itemsize
        return Prepared(job, cases, refs, blob.getvalue(), (size, size, size))


@dataclass(frozen=True)
class Prepared:
    job: SandboxJob
    cases: list
    refs: list
    blob: bytes
    itemsizes: tuple[int, int, int]  # input, weight, output


def row_blocks(plan: pb.LaunchPlan) -> tuple[int, ...]:
    """Rows per program the plan's grids use, with the usual blocks: every residue of each is drawn."""
    blocks = {1, 2, 4, 8} | family(plan.family).rows_per_program(plan)
    return tuple(sorted(b for b in blocks if b <= 64))


# Families whose cases, oracle and baselines the judge has: a plan of another family is refused at the contract,
# never run against another op's oracle.
JUDGED_FAMILIES = (row_reduction.FAMILY, gated_mlp.FAMILY, rotary.FAMILY, residual_norm.FAMILY, plain_mlp.FAMILY)


def family_contract(ops, contract: pb.Contract, intro: pb.ModuleIntrospection) -> pb.ContractEvidence:
    """The contract against the live class and its op family's wrapper (the family's signature, not an author's)."""
    if ops.FAMILY not in JUDGED_FAMILIES:
        return pb.ContractEvidence(
            passed=False,
            rule_id="contract-kind",
            error=f"the judge has no cases or oracle for op family {ops.FAMILY!r} yet (it judges "
            f"{', '.join(JUDGED_FAMILIES)})",
        )
    kind = getattr(ops, "KIND", "module_class")
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
