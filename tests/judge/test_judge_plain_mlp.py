"""The judge on the plain-MLP family: GPT-2's MLP (c_fc → gelu_new → c_proj) as a layer contract checked against its
recorded maps, single operands drawn at the live intermediate width, torch's own gelu_new (HF's module, op by op) as
the oracle. The template's kernel (Triton, interpreted) passes in bf16 and fp32; one that drops the cubic term, or
an element past a block's edge, is rejected for what it got wrong."""

from __future__ import annotations

import torch
from judge_testkit import log_of
from transformers import GPT2Config
from transformers.models.gpt2.modeling_gpt2 import GPT2MLP

from services.coder.templates import mlp_act
from services.core.kernels import candidate_sha256
from services.core.pb import events_pb2 as pb
from services.judge.service import JudgeService
from services.ops import plain_mlp
from services.server.introspection import introspect_module

HIDDEN, INTERMEDIATE = 32, 128


def _mlp() -> torch.nn.Module:
    return GPT2MLP(INTERMEDIATE, GPT2Config(n_embd=HIDDEN)).eval()


def _captured(mlp: torch.nn.Module, dtype: str) -> pb.ProfileCaptured:
    intro = introspect_module(mlp)
    profile = pb.ModuleClassProfile(
        introspection=intro, instances=2, calls=8, input_shape=[1, 5, HIDDEN], dtype=dtype,
        computes=plain_mlp.recognise(mlp), probed=True, roles=plain_mlp.roles_of(mlp),
    )  # fmt: skip
    observed = pb.ProfileObservation(
        model="t", dtype=dtype, hardware=pb.HardwareFigures(device="cpu"), modules=[profile]
    )
    ranked = pb.RankedTarget(class_path=intro.class_path, supported=True)
    return pb.ProfileCaptured(observed=observed, ranking=[ranked], target_class=intro.class_path)


async def _judge(*, source: str | None = None, contract=None, dtype="torch.bfloat16") -> pb.CandidateJudged:
    mlp = _mlp()
    captured = _captured(mlp, dtype)
    profile = captured.observed.modules[0]
    intro = profile.introspection
    config = mlp_act.search_configs()[0]
    source, plan = source or mlp_act.render(config), mlp_act.plan(config)
    contract = contract or plain_mlp.layer_contract(intro.class_path, intro.forward_params, profile.roles)
    digest = candidate_sha256(source, plan)
    candidate = pb.CandidateProposed(
        candidate_id=f"c1-{digest[:10]}", target_class=intro.class_path, source=source, source_sha256=digest,
        plan=plan, contract=contract, origin="template", attempt=1,
    )  # fmt: skip
    prior = log_of(captured, candidate)
    [judged] = await JudgeService(device="cpu", examples=8).handle(prior[-1], prior)
    return judged


def test_gpt2s_mlp_is_recognised_by_running_it():
    mlp = _mlp()
    assert plain_mlp.identify(mlp) == ("mlp_gelu_tanh", "c_fc", "c_proj")  # Conv1D maps: [in, out] weights


async def test_the_template_kernel_passes_in_bf16_and_fp32():
    for dtype in ("torch.bfloat16", "torch.float32"):
        judged = await _judge(dtype=dtype)
        assert judged.reward == 1, (dtype, judged.reason)
        evidence = judged.observed.correctness
        assert evidence.checks_passed == evidence.checks_run > 20 and not evidence.error
        assert {"huge", "nonfinite", "zeros", "tiny"} <= set(evidence.regimes)
        assert "the bound children's shapes fit their roles" in judged.observed.contract.checks


async def test_a_kernel_without_the_cubic_term_is_rejected():
    source = mlp_act.render(mlp_act.search_configs()[0]).replace("(x + 0.044715 * x * x * x)", "x")
    judged = await _judge(source=source, dtype="torch.float32")
    assert judged.reward == -1 and judged.reason.startswith("correctness failed: outside-tolerance"), judged.reason


async def test_a_kernel_that_drops_the_last_element_of_a_block_edge_is_rejected():
    source = mlp_act.render(mlp_act.search_configs()[0]).replace("mask = offsets < n", "mask = offsets < n - 1")
    judged = await _judge(source=source)
    assert judged.reward == -1 and "nan-output" in judged.reason, judged.reason
