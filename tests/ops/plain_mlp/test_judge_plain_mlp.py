"""The judge on the plain-MLP family: GPT-2's MLP (c_fc → gelu_new → c_proj) as a layer contract checked against its
recorded maps, single operands drawn at the live intermediate width, torch's own gelu_new (HF's module, op by op) as
the oracle. The template's kernel (Triton, interpreted) passes in bf16 and fp32; one that drops the cubic term, or
an element past a block's edge, is rejected for what it got wrong. Nemotron's relu² MLP likewise."""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
from judge_testkit import log_of
from transformers import GPT2Config
from transformers.models.gpt2.modeling_gpt2 import GPT2MLP

from services.core import interpreter_rounding, kernels
from services.core.kernels import candidate_sha256
from services.core.pb import events_pb2 as pb
from services.judge.service import JudgeService
from services.ops import plain_mlp
from services.ops.plain_mlp import template as mlp_act
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


def _nemotron_mlp() -> torch.nn.Module:
    from transformers import NemotronConfig
    from transformers.models.nemotron.modeling_nemotron import NemotronMLP

    return NemotronMLP(NemotronConfig(hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, hidden_act="relu2")).eval()


async def _judge(*, source: str | None = None, contract=None, dtype="torch.bfloat16", mlp=None) -> pb.CandidateJudged:
    mlp = mlp or _mlp()
    captured = _captured(mlp, dtype)
    profile = captured.observed.modules[0]
    intro = profile.introspection
    config = mlp_act.search_configs(profile.computes)[0]
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


def test_nemotrons_relu2_mlp_is_recognised_by_running_it():
    assert plain_mlp.identify(_nemotron_mlp()) == ("mlp_relu2", "up_proj", "down_proj")


def test_the_relu2_kernel_is_torchs_relu_then_square_bit_for_bit():
    config = mlp_act.search_configs("mlp_relu2")[0]
    source, plan = mlp_act.render(config), mlp_act.plan(config)
    path = kernels.write_source(Path(tempfile.mkdtemp()) / "kernel", source)
    act = plain_mlp.make_op(plan, kernels.load_kernels(path, [plan.launches[0].kernel]))
    interpreter_rounding.install()  # bf16 casts round to nearest, as a GPU's do
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 1000, generator=gen) * 40.0
    x[0, :4] = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0])
    for dtype, bits in ((torch.bfloat16, torch.int16), (torch.float32, torch.int32)):
        got, want = act(x.to(dtype)), plain_mlp.reference("mlp_relu2")(x.to(dtype))
        assert got[0, 0].isnan() and torch.equal(got.view(bits)[:, 1:], want.view(bits)[:, 1:]), dtype


async def test_the_relu2_kernel_passes_and_one_without_the_square_is_rejected():
    for dtype in ("torch.bfloat16", "torch.float32"):
        judged = await _judge(dtype=dtype, mlp=_nemotron_mlp())
        assert judged.reward == 1, (dtype, judged.reason)
        evidence = judged.observed.correctness
        assert evidence.checks_passed == evidence.checks_run > 20 and not evidence.error
    source = mlp_act.render(mlp_act.search_configs("mlp_relu2")[0]).replace("(r * r)", "r")
    judged = await _judge(source=source, dtype="torch.float32", mlp=_nemotron_mlp())
    assert judged.reward == -1 and judged.reason.startswith("correctness failed: outside-tolerance"), judged.reason


async def test_a_kernel_without_the_cubic_term_is_rejected():
    source = mlp_act.render(mlp_act.search_configs()[0]).replace("(x + 0.044715 * x * x * x)", "x")
    judged = await _judge(source=source, dtype="torch.float32")
    assert judged.reward == -1 and judged.reason.startswith("correctness failed: outside-tolerance"), judged.reason


async def test_a_kernel_that_drops_the_last_element_of_each_block_is_rejected():
    # a lane against its block's width passes the dataflow check (`offsets < n - 1` is a hidden boundary there)
    dropped = "mask = (offsets < n) & (tl.arange(0, BLOCK) < BLOCK - 1)"
    source = mlp_act.render(mlp_act.search_configs()[0]).replace("mask = offsets < n", dropped)
    judged = await _judge(source=source)
    assert judged.reward == -1 and "nan-output" in judged.reason, judged.reason
