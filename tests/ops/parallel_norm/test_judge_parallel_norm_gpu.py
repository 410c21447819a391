"""The judge on the parallel-norm family on a CUDA GPU: Pythia-1.4B's GPT-NeoX layer in bf16 (hidden 2048, two
LayerNorms on one input), the template's dual norm compiled behind the walls, timed against eager (the two norms one
after the other), torch.compile and native (F.layer_norm twice) with the bytes the fused op must move (one read, two
writes). Runs where a GPU is (the root conftest skips `gpu` tests elsewhere)."""

from __future__ import annotations

import asyncio

import pytest
import torch
from judge_testkit import log_of, print_verdict
from test_judge_parallel_norm import _captured, _layer

from services.core.kernels import candidate_sha256
from services.core.pb import events_pb2 as pb
from services.judge.service import JudgeService
from services.ops import parallel_norm
from services.ops.parallel_norm import template as dual_norm

pytestmark = pytest.mark.gpu

HIDDEN = 2048


@pytest.mark.parametrize("index", [0, 1])
def test_the_dual_norm_kernel_is_correct_and_timed_on_the_gpu(tmp_path, index):
    layer = _layer("layernorm", torch.bfloat16, hidden=HIDDEN, heads=16)  # Pythia-1.4B's layer (its norms trained)
    captured = _captured(layer, "torch.bfloat16", shape=(1, 1, HIDDEN), device="cuda")  # a decode step
    profile = captured.observed.modules[0]
    intro = profile.introspection
    config = dual_norm.search_configs(profile.computes, HIDDEN)[index]
    source, plan = dual_norm.render(config), dual_norm.plan(config)
    digest = candidate_sha256(source, plan)
    candidate = pb.CandidateProposed(
        candidate_id=f"c1-{digest[:10]}", target_class=intro.class_path, source=source, source_sha256=digest,
        plan=plan, contract=parallel_norm.layer_contract(intro.class_path, intro.forward_params, profile.roles),
        origin="template", attempt=1,
    )  # fmt: skip
    prior = log_of(captured, candidate)
    [judged] = asyncio.run(JudgeService(device="cuda", scratch_dir=tmp_path).handle(prior[-1], prior))
    obs = judged.observed
    print_verdict(f"{profile.computes}: {config.num_warps} warps, {config.rows_per_program} rows", judged)
    assert obs.correctness.passed and not obs.correctness.interpreted, (obs.correctness.error, obs.sandbox)
    assert obs.contract.passed, obs.contract
    assert obs.timing.measured and obs.timing_check.believed, (obs.timing.reason, obs.timing_check)
    for row in obs.timing.rows:
        dims = [int(d) for d in row.shape.split("x")]
        assert dims[-1] == HIDDEN
        assert row.bytes_moved == parallel_norm.timed_bytes(dims, (2, 2, 2)), row
        assert row.eager_us > 0 and row.compile_us > 0 and row.native_us > 0
    assert judged.reward >= 2 or "host-inclusive" in judged.reason, judged.reason
