"""The judge on the rotary family: a function contract checked against the live modeling file's function, (q, k,
cos, sin) sets drawn as attention passes them, the live function itself as the oracle. The template's kernel
(Triton, interpreted) of the function's layout passes; the other layout's is rejected for what it got wrong."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import pytest
import torch
from judge_testkit import log_of

from services.core.kernels import candidate_sha256
from services.core.pb import events_pb2 as pb
from services.judge.service import JudgeService
from services.ops import rotary
from services.ops.rotary import template
from services.ops.rotary.cases import RopeSpec, draw_rope_cases, operands

QWEN2 = "transformers.models.qwen2.modeling_qwen2.apply_rotary_pos_emb"
COHERE = "transformers.models.cohere.modeling_cohere.apply_rotary_pos_emb"
GLM = "transformers.models.glm.modeling_glm.apply_rotary_pos_emb"
NEOX = "transformers.models.gpt_neox.modeling_gpt_neox.apply_rotary_pos_emb"
GEMMA4 = "transformers.models.gemma4.modeling_gemma4.apply_rotary_pos_emb"
GPT_OSS = "transformers.models.gpt_oss.modeling_gpt_oss.apply_rotary_pos_emb"
GPTJ = "transformers.models.gptj.modeling_gptj.apply_rotary_pos_emb"
HERE = Path(__file__).resolve().parent


def _captured(target: str, variant: str, dtype: str = "torch.bfloat16", cos=(1, 5, 16)) -> pb.ProfileCaptured:
    """What the server records of a modeling file's RoPE function (services.server.profiling): q of (1, 4, 5, 16),
    cos of `cos` (narrower than the head where only part of it rotates)."""
    from services.judge.module_factory import import_function

    _, fn = import_function(target)
    intro = pb.ModuleIntrospection(class_path=target, forward_params=list(inspect.signature(fn).parameters), leaf=True)
    profile = pb.ModuleClassProfile(
        introspection=intro, instances=1, calls=8, input_shape=[1, 4, 5, 16], dtype=dtype, computes=variant,
        probed=True, third_shape=list(cos),
    )  # fmt: skip
    observed = pb.ProfileObservation(
        model="t", dtype=dtype, hardware=pb.HardwareFigures(device="cpu"), modules=[profile]
    )
    return pb.ProfileCaptured(observed=observed, ranking=[pb.RankedTarget(class_path=target)], target_class=target)


def _proposal(captured: pb.ProfileCaptured, config: pb.TemplateConfig, contract: pb.Contract | None = None):
    """The coder's proposal of the template's kernel for `config`, under the function's contract by default."""
    intro = captured.observed.modules[0].introspection
    contract = contract or rotary.function_contract(intro.class_path, intro.forward_params)
    source, plan = template.render(config), template.plan(config)
    digest = candidate_sha256(source, plan)
    return pb.CandidateProposed(
        candidate_id=f"c1-{digest[:10]}", target_class=intro.class_path, source=source, source_sha256=digest,
        plan=plan, contract=contract, config=config, origin="template", attempt=1,
    )  # fmt: skip


async def _judge(
    target: str, live_variant: str, kernel_variant: str, contract: pb.Contract | None = None, cos=(1, 5, 16)
):
    captured = _captured(target, live_variant, cos=cos)
    prior = log_of(captured, _proposal(captured, template.search_configs(kernel_variant)[0], contract))
    [judged] = await JudgeService(device="cpu", examples=8).handle(prior[-1], prior)
    return judged


@pytest.mark.parametrize(
    ("target", "right", "wrong"), [(QWEN2, "rope_half", "rope_interleaved"), (COHERE, "rope_interleaved", "rope_half")]
)
async def test_the_kernel_of_the_functions_layout_passes_and_the_other_is_rejected(target, right, wrong):
    passed = await _judge(target, right, right)
    assert passed.reward == 1, passed.reason
    evidence = passed.observed.correctness
    assert evidence.checks_passed == evidence.checks_run >= 12 and not evidence.error
    assert {"huge", "nonfinite", "zeros", "tiny"} <= set(evidence.regimes)
    assert "the function imports with those parameters" in passed.observed.contract.checks
    rejected = await _judge(target, right, wrong)
    assert rejected.reward == -1 and rejected.reason.startswith("correctness failed: outside-tolerance"), (
        rejected.reason
    )


@pytest.mark.parametrize(
    ("target", "variant", "other", "width"),
    [(GLM, "rope_pairs_partial", "rope_half_partial", 8), (NEOX, "rope_half_partial", "rope_pairs_partial", 4)],
)
async def test_a_partial_rotary_is_judged_at_its_live_width(target, variant, other, width):
    """GLM rotates (even, odd) pairs over half of each head, GPT-NeoX the halves of a quarter (Pythia's), and both
    pass the rest through: the cases draw cos at the live rotary width the profile recorded; the function's kernel
    passes, the other partial layout's is rejected for its answers and a whole-head kernel for taking no
    narrower cos."""
    passed = await _judge(target, variant, variant, cos=(1, 5, width))
    assert passed.reward == 1, passed.reason
    evidence = passed.observed.correctness
    assert evidence.checks_passed == evidence.checks_run >= 12 and not evidence.error
    spec = RopeSpec((1, 4, 5, 16), torch.bfloat16, gpu=False, rotary_dim=width)  # what the judge drew from
    cases = draw_rope_cases(spec, variant, seed=1)
    assert all(c.cos.shape[-1] == width and c.shape[-1] == 16 and f"rotary-dim {width}" in c.name for c in cases)
    rejected = await _judge(target, variant, other, cos=(1, 5, width))
    assert rejected.reward == -1 and rejected.reason.startswith("correctness failed: outside-tolerance"), (
        rejected.reason
    )
    rejected = await _judge(target, variant, "rope_half", cos=(1, 5, width))
    assert rejected.reward == -1 and "do not fit together" in rejected.reason, rejected.reason


async def test_a_contract_that_does_not_fit_the_function_is_refused():
    contract = rotary.function_contract(QWEN2, ["q", "k", "cos", "sin", "unsqueeze_dim"])
    contract.target = COHERE
    judged = await _judge(QWEN2, "rope_half", "rope_half", contract)
    assert judged.reward == -1 and judged.observed.contract.rule_id == "contract-target", judged.reason
    contract = rotary.function_contract(QWEN2, ["q", "k", "cos", "sin", "unsqueeze_dim"])
    contract.bindings.add(param="weight", attr="inv_freq", kind="tensor")
    judged = await _judge(QWEN2, "rope_half", "rope_half", contract)
    assert judged.reward == -1 and judged.observed.contract.rule_id == "binding-kind", judged.reason


async def test_a_function_called_seq_major_is_judged_at_its_heads_major_shape():
    """A caller passing unsqueeze_dim=2 (DeepSeek-V3.2's indexer) records q as (batch, seq, heads, dim): the judge
    draws it as (batch, heads, seq, dim) from cos's seq, so the live case has the live heads, not seq as heads."""
    captured = _captured(QWEN2, "rope_half")
    captured.observed.modules[0].input_shape[:] = [1, 5, 4, 16]  # seq 5 (cos's), 4 heads
    prior = log_of(captured, _proposal(captured, template.search_configs("rope_half")[0]))
    [judged] = await JudgeService(device="cpu", examples=8).handle(prior[-1], prior)
    assert judged.reward == 1, judged.reason
    assert judged.observed.correctness.shapes[0] == "1x4x5x16"


async def test_a_dispatch_by_position_count_is_judged_on_both_sides_of_its_limit():
    """One candidate launching a program per head at 16 positions for calls of up to 8 positions and a program per
    position beyond: the judge draws calls at and past the limit, and a large-side launch that rotates only the
    first part of each half (its BLOCK a literal too small) is rejected, the small side passing alone."""
    small = template.search_configs("rope_half")[2]
    large = template.search_configs("rope_half")[0]
    assert small.params["positions"] == 16 and large.params["together"] == 1
    config = template.combine(small, large, limit=8)
    captured = _captured(QWEN2, "rope_half")
    proposal = _proposal(captured, config)
    assert [launch.max_rows for launch in proposal.plan.launches] == [8, 0]
    prior = log_of(captured, proposal)
    [judged] = await JudgeService(device="cpu", examples=8).handle(prior[-1], prior)
    assert judged.reward == 1, judged.reason
    shapes = set(judged.observed.correctness.shapes)
    assert {"1x4x8x16", "1x4x9x16"} <= shapes, shapes

    broken = pb.CandidateProposed()
    broken.CopyFrom(proposal)
    broken.plan.launches[1].constexprs["BLOCK"] = "4"  # half of 16 is 8: dims 4..7 of each half never written
    broken.source_sha256 = candidate_sha256(broken.source, broken.plan)
    broken.candidate_id = f"c1-{broken.source_sha256[:10]}"
    prior = log_of(captured, broken)
    [rejected] = await JudgeService(device="cpu", examples=8).handle(prior[-1], prior)
    assert rejected.reward == -1 and "correctness failed" in rejected.reason, rejected.reason


async def test_a_function_of_one_tensor_is_judged_on_q_alone_as_it_is_called():
    """Gemma 4's apply_rotary_pos_emb(x, cos, sin, unsqueeze_dim) rotates q, then k, in two calls: the contract maps
    x to the wrapper's q (found again by the judge, by running the function), every case rotates q alone and the
    op is called without k, as the server's binder calls it. A contract calling it as (q, k, cos, sin) is refused."""
    captured = _captured(GEMMA4, "rope_half")
    profile = captured.observed.modules[0]
    profile.roles.update({"x": "q", "cos": "cos", "sin": "sin", "unsqueeze_dim": "unsqueeze_dim"})
    profile.input_shape[:] = [1, 5, 4, 16]  # as Gemma 4 passes it: (batch, seq, heads, dim), unsqueeze_dim=2
    contract = rotary.function_contract(GEMMA4, profile.introspection.forward_params, profile.roles)
    prior = log_of(captured, _proposal(captured, template.search_configs("rope_half")[0], contract))
    [judged] = await JudgeService(device="cpu", examples=8).handle(prior[-1], prior)
    assert judged.reward == 1, judged.reason
    evidence = judged.observed.correctness
    assert evidence.checks_passed == evidence.checks_run >= 12 and evidence.shapes[0] == "1x4x5x16"
    assert "rope(q, cos, sin, unsqueeze_dim) = the function's parameters" in judged.observed.contract.checks

    by_position = rotary.function_contract(GEMMA4, profile.introspection.forward_params)  # (q, k, cos, sin)
    prior = log_of(captured, _proposal(captured, template.search_configs("rope_half")[0], by_position))
    [refused] = await JudgeService(device="cpu", examples=8).handle(prior[-1], prior)
    assert refused.reward == -1 and refused.observed.contract.rule_id == "entry-signature", refused.reason
    assert "what they are: (q, cos, sin, unsqueeze_dim)" in refused.reason


async def test_gpt_oss_rope_is_judged_with_one_angle_a_pair():
    """GPT-OSS's cos and sin are half the head wide (one angle a pair, as its profile records them): every case draws
    them so, its kernel passes and the whole-head kernel (which reads both halves of cos) is refused for them."""
    passed = await _judge(GPT_OSS, "rope_half_angles", "rope_half_angles", cos=(1, 5, 8))
    assert passed.reward == 1, passed.reason
    evidence = passed.observed.correctness
    assert evidence.checks_passed == evidence.checks_run >= 12 and not evidence.error
    spec = RopeSpec((1, 4, 5, 16), torch.bfloat16, gpu=False, rotary_dim=8)  # the profile's cos width
    assert all(c.cos.shape[-1] == 8 and c.shape[-1] == 16 for c in draw_rope_cases(spec, "rope_half_angles", seed=1))
    rejected = await _judge(GPT_OSS, "rope_half_angles", "rope_half", cos=(1, 5, 8))
    assert rejected.reward == -1 and "do not fit together" in rejected.reason, rejected.reason


async def test_gpt_j_rope_is_judged_on_one_seq_major_tensor():
    """GPT-J's apply_rotary_pos_emb(tensor, sin, cos) rotates one (batch, seq, heads, dim) tensor by one angle a pair:
    the judge calls it so (by its own parameter names) and the op as the binder does (x_seq_major, sin, cos); its
    kernel passes, the half layout's is rejected for its answers."""
    captured = _captured(GPTJ, "rope_pairs_angles", cos=(1, 5, 8))
    profile = captured.observed.modules[0]
    profile.roles.update({"tensor": "x_seq_major", "sin": "sin", "cos": "cos"})
    profile.input_shape[:] = [1, 5, 4, 16]  # seq-major, as GPT-J passes it
    contract = rotary.function_contract(GPTJ, profile.introspection.forward_params, profile.roles)

    async def judged(variant: str):
        prior = log_of(captured, _proposal(captured, template.search_configs(variant)[0], contract))
        [verdict] = await JudgeService(device="cpu", examples=8).handle(prior[-1], prior)
        return verdict

    passed = await judged("rope_pairs_angles")
    assert passed.reward == 1, passed.reason
    assert passed.observed.correctness.shapes[0] == "1x4x5x16"
    assert "rope(x_seq_major, sin, cos) = the function's parameters" in passed.observed.contract.checks
    rejected = await judged("rope_half_angles")
    assert rejected.reward == -1 and rejected.reason.startswith("correctness failed: outside-tolerance"), (
        rejected.reason
    )


def test_every_sequence_of_a_batch_has_its_own_positions_and_a_cpu_draws_a_decode_of_several():
    """The server's batched decode steps each slot at its own position: cos and sin differ across the batch in every
    case of several sequences with their own angles, and a CPU draws a decode step of more than two of them."""
    spec = RopeSpec((1, 4, 5, 16), torch.float32, gpu=False, max_batch=16)
    cases = draw_rope_cases(spec, "rope_half", seed=3)
    own = [c for c in cases if c.cos.shape[0] > 1]
    assert own and all(not torch.equal(c.cos[0], c.cos[1]) for c in own), [c.name for c in own]
    [decode] = [c for c in cases if c.name.startswith("batch-decode")]
    assert decode.shape[0] == 8 and decode.cos.shape[0] == 8 and decode.shape[2] == 1


def test_a_decode_step_of_requests_alike_gives_every_sequence_the_firsts_q_k_and_angles():
    """Requests alike (one prompt sampled n times) are equal row for row at every layer: a kernel keyed to a row equal
    to another of its call meets them here, as the norms' repeated rows meet theirs."""
    spec = RopeSpec((1, 4, 5, 16), torch.float32, gpu=False, max_batch=16)
    [alike] = [c for c in draw_rope_cases(spec, "rope_half", seed=3) if c.name.startswith("alike")]
    assert alike.shape[0] >= 3 and alike.shape[2] == 1 and alike.cos.shape[0] == 1
    for t in (alike.q, alike.k):
        assert all(torch.equal(t[0], t[i]) for i in range(1, len(t))) and t[0].abs().sum() > 0


def test_a_prefill_whose_tokens_recur_holds_equal_q_and_k_at_positions_apart_each_at_its_own_angle():
    """A layer-0 q and k repeat with their token at positions apart, where the angles differ: a kernel keyed to a
    position's q equal to another position's meets them here (the pairs' operands repeating alone are the norms')."""
    spec = RopeSpec((1, 4, 5, 16), torch.float32, gpu=False)
    [case] = [c for c in draw_rope_cases(spec, "rope_half", seed=5) if c.name.startswith("repeated ")]
    b, hq, s, d = case.shape
    assert (b, s) == (1, 32) and case.layout == "attention"  # two blocks of 16 (a plan's of 64: two of 64)
    blocks = dataclasses.replace(spec, positions_per_program=64)
    assert [c.shape[2] for c in draw_rope_cases(blocks, "rope_half", seed=5) if c.name.startswith("repeated ")] == [128]
    for t in (case.q, case.k):
        rows = t.reshape(s, -1)  # a position's heads, as the attention layout holds them
        equal = (rows[:, None] == rows[None, :]).all(-1)
        assert all(any(bool(equal[i, i - dist]) for i in range(dist, s)) for dist in range(1, s)), "every distance"
        assert not bool(equal.all()) and rows.abs().sum() > 0
    angles = case.cos.reshape(s, -1)
    assert all(not torch.equal(angles[i], angles[j]) for i in range(s) for j in range(i))  # each position its own


async def test_a_kernel_keyed_to_positions_far_apart_in_its_tile_is_rejected_on_the_prefill_of_recurring_tokens():
    """Red-team round 11's RoPE: one head at 64 positions a program, 20% off where a position's q or k equals one
    32-63 positions before it in the tile; the recurring prefill spans two of the plan's blocks (128 positions)."""
    from candidate_files import plan_of

    captured = _captured(QWEN2, "rope_half")
    proposal = _proposal(captured, template.search_configs("rope_half")[0])
    proposal.source = (HERE / "rope_far_positions_in_a_tile.py").read_text()
    proposal.plan.CopyFrom(plan_of(proposal.source))
    proposal.source_sha256 = candidate_sha256(proposal.source, proposal.plan)
    prior = log_of(captured, proposal)
    [judged] = await JudgeService(device="cpu", examples=8).handle(prior[-1], prior)
    assert judged.reward == -1 and judged.reason.startswith("correctness failed: outside-tolerance"), judged.reason
    assert "repeated q 1x4x128x16" in judged.reason, judged.reason


@pytest.mark.parametrize(
    ("honest", "hostile"),
    [
        # every sequence turned by the first one's angles: the cos batch stride left out (refused before anything runs
        # now: `row-local`, cos read at a part of its rows; the batch-decode case met it before)
        ("b * c_sb + s * c_ss", "s * c_ss"),
        # sequences 2 and 3 read sequences 0's and 1's q and k (`b * b % 2` is b for 0 and 1 only): refused before
        # anything runs (`row-pick`: an address built from a curved row); the batch-decode case meets it too
        ("x_ptr + b * x_sb + s * x_ss", "x_ptr + b * b % 2 * x_sb + s * x_ss"),
    ],
)
async def test_a_kernel_wrong_for_sequences_past_the_first_two_is_rejected(honest, hostile):
    """Two kernels a red-team author wrote against the judge of 2026-12-05, each accepted then: right for a batch of
    one or two sequences at the same positions, which were all a CPU judging drew."""
    captured = _captured(QWEN2, "rope_half")
    proposal = _proposal(captured, template.search_configs("rope_half")[0])
    assert honest in proposal.source, "the template changed: find the line again"
    proposal.source = proposal.source.replace(honest, hostile)
    proposal.source_sha256 = candidate_sha256(proposal.source, proposal.plan)
    prior = log_of(captured, proposal)
    [judged] = await JudgeService(device="cpu", examples=8).handle(prior[-1], prior)
    assert judged.reward == -1, judged.reason
    if "b * b" in hostile:
        assert judged.observed.static_check.findings[0].rule_id == "row-pick", judged.reason
    else:
        assert judged.reason.startswith("static check failed: row-local: cos is read at rows"), judged.reason


def test_past_a_dispatch_limit_the_vectors_are_of_every_regime():
    """A second kernel for calls past 48 positions that flattened elements over ~30 was judged on normal vectors only
    there (a red-team kernel of 2026-12-05): the call one past each limit now holds vectors of every regime."""
    spec = RopeSpec((1, 4, 5, 16), torch.float32, gpu=False, boundaries=(48,))
    [past] = [c for c in draw_rope_cases(spec, "rope_half", seed=2) if c.name.startswith("launch-regimes q 1x4x49")]
    assert past.regime == "mixed"
    vectors = past.q.reshape(-1, 16)
    finite = torch.isfinite(vectors).all(-1)
    assert not bool(finite.all()) and float(vectors[finite].abs().max()) > 1e3  # non-finite ones, huge ones


# Each head's vector passed through x / (1 + (x² / (100 m²))^24), m its mean magnitude: exact on vectors Gaussian
# inside a head (every RoPE regime), it flattens a channel ten times the rest, as a k projection's bias puts in every
# key (a red-team kernel against the judge of 2026-12-05, accepted in a plan of one launch).
FLATTEN = """    x1 = x1.to(tl.float32)
    x2 = x2.to(tl.float32)
    m = (tl.sum(tl.minimum(tl.abs(x1), 1e30), axis=1) + tl.sum(tl.minimum(tl.abs(x2), 1e30), axis=1)) / (2 * HALF)
    m2 = (m * m)[:, None] * 100.0 + 1e-30
    t1 = x1 * x1 / m2
    t2 = x2 * x2 / m2
    t1 = t1 * t1 * t1
    t2 = t2 * t2 * t2
    t1 = t1 * t1
    t2 = t2 * t2
    t1 = t1 * t1
    t2 = t2 * t2
    t1 = t1 * t1
    t2 = t2 * t2
    x1 = x1 / (1.0 + t1)
    x2 = x2 / (1.0 + t2)
"""


async def test_a_kernel_flattening_a_heads_large_channels_is_rejected_in_a_plan_of_one_launch():
    """Every plan, of one launch too, meets a case of every row regime per head vector (outlier channels, spikes,
    offsets), not only RoPE's own regimes."""
    captured = _captured(QWEN2, "rope_half")
    proposal = _proposal(captured, template.search_configs("rope_half")[0])
    honest = "    x1 = x1.to(tl.float32)\n    x2 = x2.to(tl.float32)\n"
    assert honest in proposal.source and len(proposal.plan.launches) == 1, "the template changed"
    proposal.source = proposal.source.replace(honest, FLATTEN)
    proposal.source_sha256 = candidate_sha256(proposal.source, proposal.plan)
    prior = log_of(captured, proposal)
    [judged] = await JudgeService(device="cpu", examples=0).handle(prior[-1], prior)
    # refused on the mixed case of every launch, or since 2026-12-07 on any case whose heavy-tailed bulk (each head
    # vector's tail weight its own: services.judge.cases.bulk) holds an element ten times its mean
    assert judged.reward == -1 and "outside-tolerance" in judged.reason, judged.reason


def test_cos_and_sin_come_at_many_bases_and_far_cases_are_not_of_unit_norm():
    """The frequency base varies by case (a kernel keyed to 1e4 was 30% off on Qwen2.5's 1e6, a red-team kernel of
    2026-12-06), and far cases scale cos and sin as YaRN's attention factor does."""
    cases = draw_rope_cases(RopeSpec((1, 4, 5, 16), torch.float32, gpu=False), "rope_half", seed=4)
    # the second pair's angle against the first's, at a position past 0: base ** (-2 / dim)
    ratios = {
        round(float((c.cos[0, -1, 1].acos() / c.cos[0, -1, 0].acos()).log10()), 2)
        for c in cases
        if c.cos.shape[1] > 1 and "far" not in c.name
    }
    assert len(ratios) > 3, ratios
    far = [c for c in cases if "far-positions" in c.name]
    norm = [float((c.cos.double() ** 2 + c.sin.double() ** 2).mean()) for c in far]
    assert far and max(norm) > 1.01 and min(norm) >= 1.0 - 1e-6, norm


async def test_a_kernel_keyed_to_the_live_base_and_a_band_of_positions_meets_the_position_sweep():
    """A red-team kernel of 2026-12-07 (`live_base_position_band.py`): 30% low at positions 48-600 of the served
    base, exact elsewhere. The live rotary (base 1e4, as the tiny presets') is recorded in the profile; the judge's
    position sweep on it reaches the band, where the live-values case's few positions did not."""
    from services.server.live_parameters import tensor_message

    captured = _captured(QWEN2, "rope_half", dtype="torch.float32")
    captured.observed.max_positions = 512
    inv = 1.0 / (10000.0 ** (torch.arange(0, 16, 2, dtype=torch.float32) / 16))
    live = [tensor_message("attention_scaling", torch.tensor([1.0])), tensor_message("inv_freq", inv)]
    captured.observed.modules[0].live_parameters.add(instances=1, tensors=live)
    captured.observed.modules[0].live_parameter_sets = 1
    judged = await _judged_file("live_base_position_band.py", captured)
    # refused on a live case: the sweep's, or now and then (its random start in the band) the two sequences'
    assert judged.reward == -1 and "live-values" in judged.reason, judged.reason


async def _judged_file(name: str, captured: pb.ProfileCaptured):
    from candidate_files import load

    proposal = _proposal(captured, template.search_configs("rope_half")[0])
    proposal.source, plan = load(HERE / name)
    proposal.plan.CopyFrom(plan)
    proposal.source_sha256 = candidate_sha256(proposal.source, proposal.plan)
    prior = log_of(captured, proposal)
    [judged] = await JudgeService(device="cpu", examples=0).handle(prior[-1], prior)
    return judged


async def test_a_second_launch_that_reads_the_first_sequences_angles_meets_a_decode_of_many_slots():
    """A red-team kernel of 2026-12-07 (`second_launch_first_sequences_angles.py`): its launch past 16 positions drops
    cos's batch offset. Every launch now meets a decode of several sequences at their own positions in its share; the
    row-local rule refuses it before it runs (cos, a table, read at a part of its store's rows)."""
    captured = _captured(QWEN2, "rope_half", dtype="torch.float32")
    judged = await _judged_file("second_launch_first_sequences_angles.py", captured)
    assert judged.reward == -1 and judged.reason.startswith("static check failed: row-local: cos is read"), (
        judged.reason
    )


async def test_a_kernel_taking_q_packed_meets_q_and_k_as_chunks_of_a_fused_projection():
    """A red-team kernel of 2026-12-07: q's batch offset as `b * heads * seq * head_dim` (the packed stride) instead of
    its stride argument. The attention and contiguous layouts both have the packed batch stride; GPT-NeoX passes q and
    k as chunks of its fused query_key_value, three times wider: every sequence past the first read other bytes (5.4
    off on Pythia's batched decode). The fused layout's strides are none of the packed ones; the row-local rule
    refuses it before anything runs (q read at rows of the packed stride, written at its stride's)."""
    captured = _captured(QWEN2, "rope_half", dtype="torch.float32")
    proposal = _proposal(captured, template.search_configs("rope_half")[0])
    assert proposal.source.count("b * x_sb") >= 1, "the template changed: find the batch offset again"
    proposal.source = proposal.source.replace("b * x_sb", "b * (heads * seq * 2 * HALF)")
    proposal.source_sha256 = candidate_sha256(proposal.source, proposal.plan)
    prior = log_of(captured, proposal)
    [judged] = await JudgeService(device="cpu", examples=0).handle(prior[-1], prior)
    assert judged.reward == -1 and judged.reason.startswith("static check failed: row-local: q is read at rows")


def test_the_fused_layout_views_q_and_k_inside_a_wider_buffer_of_nan():
    spec = RopeSpec((1, 4, 5, 16), torch.float32, gpu=False)
    [case] = [c for c in draw_rope_cases(spec, "rope_half", seed=3) if c.name.startswith("fused ")]
    q, k, _, _ = operands((case.q, case.k, case.cos, case.sin), case.layout, (4, case.heads_k), 16)
    assert q.shape == (3, 4, 3, 16) and q.stride()[-1] == 1 and torch.isfinite(q).all()
    assert q.stride()[0] != 4 * 3 * 16 and q.stride()[1] != 16  # neither the packed batch stride nor a head's width
    assert case.q.isnan().any()  # what lies beside the vectors reads as NaN
