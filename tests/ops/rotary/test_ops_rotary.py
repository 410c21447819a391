"""The rotary family: which modeling-file function applies RoPE, found by running it (not by its name), and the
template's one-launch kernel (Triton, interpreted) answering what the HF function answers, bit for bit, on q and
k as attention passes them (transposed views of the projections)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import torch
import transformers.models.cohere.modeling_cohere as cohere
import transformers.models.deepseek_v32.modeling_deepseek_v32 as deepseek_v32
import transformers.models.ernie4_5.modeling_ernie4_5 as ernie
import transformers.models.gemma.modeling_gemma as gemma
import transformers.models.gemma4.modeling_gemma4 as gemma4
import transformers.models.glm.modeling_glm as glm
import transformers.models.gpt2.modeling_gpt2 as gpt2
import transformers.models.gpt_neox.modeling_gpt_neox as gpt_neox
import transformers.models.gpt_oss.modeling_gpt_oss as gpt_oss
import transformers.models.gptj.modeling_gptj as gptj
import transformers.models.helium.modeling_helium as helium
import transformers.models.llama.modeling_llama as llama
import transformers.models.qwen2.modeling_qwen2 as qwen2

from services.core import interpreter_rounding, kernels
from services.core.kernel_schema import check_kernel_source
from services.core.pb import events_pb2 as pb
from services.ops import family, rotary
from services.ops.rotary import template


def _op(config):
    source, plan = template.render(config), template.plan(config)
    report = check_kernel_source(source)
    assert not report.findings and family("rotary").check_plan(plan, report.kernels) == []
    path = kernels.write_source(Path(tempfile.mkdtemp()) / "kernel", source)
    return rotary.make_op(plan, kernels.load_kernels(path, [plan.launches[0].kernel]))


def _operands(variant: str, dtype, batch=2, seq=5, heads_q=4, heads_k=2, dim=16, rotary_dim=0):
    """q and k as attention passes them: (batch, seq, heads·dim) projections viewed and transposed; cos and sin of
    `rotary_dim` (the head's where 0), in the half layout but for Cohere's."""
    gen = torch.Generator().manual_seed(dim)
    q = torch.randn(batch, seq, heads_q * dim, generator=gen).to(dtype).view(batch, seq, heads_q, dim).transpose(1, 2)
    k = torch.randn(batch, seq, heads_k * dim, generator=gen).to(dtype).view(batch, seq, heads_k, dim).transpose(1, 2)
    theta = torch.rand(batch, seq, (rotary_dim or dim) // 2, generator=gen) * 6
    interleaved = variant == "rope_interleaved"
    theta = torch.repeat_interleave(theta, 2, -1) if interleaved else torch.cat((theta, theta), -1)
    return q, k, theta.cos().to(dtype), theta.sin().to(dtype)


def test_the_rope_function_of_a_modeling_file_is_found_by_what_it_computes():
    modules = (qwen2, llama, gemma, cohere, glm, gpt_neox, helium, ernie, gpt2, gpt_oss, gptj)
    found = {m.__name__.rsplit(".", 1)[-1]: rotary.find_functions(m) for m in modules}
    assert found == {
        "modeling_qwen2": {"transformers.models.qwen2.modeling_qwen2.apply_rotary_pos_emb": "rope_half"},
        "modeling_llama": {"transformers.models.llama.modeling_llama.apply_rotary_pos_emb": "rope_half"},
        "modeling_gemma": {"transformers.models.gemma.modeling_gemma.apply_rotary_pos_emb": "rope_half"},
        "modeling_cohere": {"transformers.models.cohere.modeling_cohere.apply_rotary_pos_emb": "rope_interleaved"},
        # pairs rotated by the half layout's angles over cos's width, the rest of the head passed through
        "modeling_glm": {"transformers.models.glm.modeling_glm.apply_rotary_pos_emb": "rope_pairs_partial"},
        # rotate_half over cos's width, the rest passed through: with cos as wide as the head it computes rope_half,
        # but Pythia calls it with a quarter of the head, which only the partial kernel takes
        "modeling_gpt_neox": {
            "transformers.models.gpt_neox.modeling_gpt_neox.apply_rotary_pos_emb": "rope_half_partial"
        },
        # GLM's pairs over the whole head (no split; Ernie's in fp32, cast once): the pairs kernel at cos's width
        "modeling_helium": {"transformers.models.helium.modeling_helium.apply_rotary_pos_emb": "rope_pairs_partial"},
        "modeling_ernie4_5": {
            "transformers.models.ernie4_5.modeling_ernie4_5.apply_rotary_pos_emb": "rope_pairs_partial"
        },
        "modeling_gpt2": {},  # learned positions: no rotary function
        # rotate_half's maths with cos and sin of one angle a pair, half the head wide
        "modeling_gpt_oss": {"transformers.models.gpt_oss.modeling_gpt_oss.apply_rotary_pos_emb": "rope_half_angles"},
        # one seq-major tensor, (tensor, sin, cos), (even, odd) pairs by one angle a pair
        "modeling_gptj": {"transformers.models.gptj.modeling_gptj.apply_rotary_pos_emb": "rope_pairs_angles"},
    }

    def renamed(query, key, c, s):  # another name, another layout of the same maths: still found
        return rotary.reference("rope_half")(query, key, c, s)

    def scaled(q, k, cos, sin):  # rotates, then scales: not RoPE
        q2, k2 = rotary.reference("rope_half")(q, k, cos, sin)
        return 2 * q2, k2

    assert rotary.recognise_function(renamed) == "rope_half"
    assert rotary.recognise_function(scaled) is None
    assert rotary.recognise_function(lambda q, k: (q, k)) is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("variant", "hf", "rotary_dim"), [
    ("rope_half", qwen2.apply_rotary_pos_emb, 0),
    ("rope_interleaved", cohere.apply_rotary_pos_emb, 0),
    # GLM's: half the head (its default), an odd number of pairs, the whole head
    ("rope_pairs_partial", glm.apply_rotary_pos_emb, 8),
    ("rope_pairs_partial", glm.apply_rotary_pos_emb, 6),
    ("rope_pairs_partial", glm.apply_rotary_pos_emb, 16),
    ("rope_pairs_partial", helium.apply_rotary_pos_emb, 16),  # Helium's: the same pairs, no split
    # GPT-NeoX's: a quarter of the head (Pythia's), half, the whole head
    ("rope_half_partial", gpt_neox.apply_rotary_pos_emb, 4),
    ("rope_half_partial", gpt_neox.apply_rotary_pos_emb, 8),
    ("rope_half_partial", gpt_neox.apply_rotary_pos_emb, 16),
])  # fmt: skip
@pytest.mark.parametrize(("together", "heads", "positions"), [(1, 0, 0), (0, 16, 0), (1, 2, 0), (0, 0, 4), (0, 0, 16)],
                         ids=["q-and-k-one-program", "q-and-k-two-programs", "a-loop-over-head-tiles",
                              "a-head-at-blocks-of-positions", "a-head-at-one-block-of-all-positions"])  # fmt: skip
def test_the_kernel_answers_what_the_hf_function_answers_bit_for_bit(
    variant, hf, rotary_dim, dtype, together, heads, positions
):
    interpreter_rounding.install()  # bf16 casts round to nearest, as a GPU's do
    config = template.search_configs(variant)[0]
    config.params.update(heads=heads, together=together, positions=positions)
    op = _op(config)
    q, k, cos, sin = _operands(variant, dtype, rotary_dim=rotary_dim)
    assert not q.is_contiguous()
    got, want = op(q, k, cos, sin), hf(q, k, cos, sin)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape and torch.equal(g, w)
    # one batch of cos and sin broadcast over a batch of q and k (the rotary module gives one when positions agree)
    got = op(q, k, cos[:1], sin[:1])
    want = hf(q, k, cos[:1].expand_as(cos), sin[:1].expand_as(sin))
    assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_q_and_k_passed_seq_major_are_rotated_as_the_hf_function_rotates_them(dtype):
    """DeepSeek-V3.2's indexer and HunYuan v4 pass q and k as (batch, seq, heads, head_dim) with unsqueeze_dim=2:
    the op answers bit for bit what the function answers, in the caller's order."""
    interpreter_rounding.install()
    op = _op(template.search_configs("rope_half")[0])
    q, k, cos, sin = _operands("rope_half", dtype)
    q, k = q.transpose(1, 2), k.transpose(1, 2)  # the projections' (batch, seq, heads, dim), contiguous
    assert q.is_contiguous()
    got, want = op(q, k, cos, sin, unsqueeze_dim=2), deepseek_v32.apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=2)
    assert all(g.shape == w.shape and torch.equal(g, w) for g, w in zip(got, want, strict=True))


def test_a_function_of_one_tensor_is_found_with_the_roles_of_its_parameters():
    """Gemma 4 (and 3n) rotate q and k in two calls of apply_rotary_pos_emb(x, cos, sin, unsqueeze_dim): found by
    calling it so, its parameters mapped to the wrapper's, its contract naming no k."""
    target = "transformers.models.gemma4.modeling_gemma4.apply_rotary_pos_emb"
    assert rotary.find_functions(gemma4) == {target: "rope_half"}
    found = rotary.recognise_call(gemma4.apply_rotary_pos_emb)
    assert found == ("rope_half", {"x": "q", "cos": "cos", "sin": "sin", "unsqueeze_dim": "unsqueeze_dim"})
    contract = rotary.function_contract(target, ["x", "cos", "sin", "unsqueeze_dim"], found.roles)
    assert list(contract.entry_inputs) == ["q", "cos", "sin", "unsqueeze_dim"] and rotary.one_tensor(contract)
    assert rotary.recognise_call(qwen2.apply_rotary_pos_emb) == ("rope_half", {})  # two tensors: by position
    assert not rotary.one_tensor(rotary.function_contract("f", ["q", "k", "cos", "sin"]))

    def other_tail(x, cos, sin, position_ids=None):  # computes it, but a parameter the wrapper has no role for
        return gemma4.apply_rotary_pos_emb(x, cos, sin)

    roles = rotary.recognise_call(other_tail).roles
    assert roles == {"x": "q", "cos": "cos", "sin": "sin"}
    assert rotary.function_contract("f", ["x", "cos", "sin", "position_ids"], roles) is None
    assert rotary.recognise_call(lambda x, cos, sin: 2 * gemma4.apply_rotary_pos_emb(x, cos, sin)) is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("together", "heads", "positions"), [(1, 0, 0), (0, 16, 0), (0, 0, 4)],
                         ids=["one-program-a-position", "two-programs-a-position", "a-head-at-blocks"])  # fmt: skip
def test_one_tensor_is_rotated_as_gemma4_rotates_it(dtype, together, heads, positions):
    """The wrapper called as Gemma 4 calls its function (x of (batch, seq, heads, dim), unsqueeze_dim=2, and the
    heads-major form): the same launch with k of no heads, q's output bit for bit the function's."""
    interpreter_rounding.install()
    config = template.search_configs("rope_half")[0]
    config.params.update(heads=heads, together=together, positions=positions)
    op = _op(config)
    q, _, cos, sin = _operands("rope_half", dtype)
    seq_major = q.transpose(1, 2)
    for x, dim in ((seq_major, 2), (q, 1)):
        got, want = op(q=x, cos=cos, sin=sin, unsqueeze_dim=dim), gemma4.apply_rotary_pos_emb(x, cos, sin, dim)
        assert isinstance(got, torch.Tensor) and got.shape == want.shape and torch.equal(got, want)
    with pytest.raises(ValueError, match="rope of one tensor takes x of 4 dims"):
        op(q=q[0], cos=cos, sin=sin)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("together", "heads", "positions"), [(1, 0, 0), (0, 16, 0), (0, 0, 4)],
                         ids=["one-program-a-position", "two-programs-a-position", "a-head-at-blocks"])  # fmt: skip
def test_gpt_oss_angles_are_rotated_as_its_function_rotates_them(dtype, together, heads, positions):
    """GPT-OSS's cos and sin hold one angle a pair (half the head wide): its kernel, told ANGLES, answers bit for bit
    what the function answers; the full-width kernel, which reads both halves of cos, refuses them."""
    interpreter_rounding.install()
    config = template.search_configs("rope_half_angles")[0]
    config.params.update(heads=heads, together=together, positions=positions)
    op = _op(config)
    q, k, cos, sin = _operands("rope_half", dtype)
    cos, sin = cos[..., : cos.shape[-1] // 2], sin[..., : sin.shape[-1] // 2]  # one angle a pair
    got, want = op(q, k, cos, sin), gpt_oss.apply_rotary_pos_emb(q, k, cos, sin)
    assert all(g.shape == w.shape and torch.equal(g, w) for g, w in zip(got, want, strict=True))
    with pytest.raises(ValueError, match="do not fit together"):
        _op(template.search_configs("rope_half")[0])(q, k, cos, sin)
    full = torch.cat((cos, cos), -1)
    with pytest.raises(ValueError, match="do not fit together"):  # nor does the angles kernel take a full-width cos
        op(q, k, full, full)


def test_gpt_j_rotates_one_seq_major_tensor_and_its_roles_say_so():
    """GPT-J's apply_rotary_pos_emb(tensor, sin, cos): sin before cos, the tensor (batch, seq, heads, rotary dims)
    sliced off each head, cos and sin of one angle a pair: found by calling it so, the tensor mapped to the
    wrapper's x_seq_major (no unsqueeze_dim to say the layout)."""
    found = rotary.recognise_call(gptj.apply_rotary_pos_emb)
    assert found == ("rope_pairs_angles", {"tensor": "x_seq_major", "sin": "sin", "cos": "cos"})
    contract = rotary.function_contract("m.f", ["tensor", "sin", "cos"], found.roles)
    assert list(contract.entry_inputs) == ["x_seq_major", "sin", "cos"] and rotary.one_tensor(contract)
    assert rotary.function_contract("m.f", ["tensor", "sin", "cos"], {"tensor": "x_seq_major", "sin": "cos"}) is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("together", "heads", "positions"), [(1, 0, 0), (0, 16, 0), (0, 0, 4)],
                         ids=["one-program-a-position", "two-programs-a-position", "a-head-at-blocks"])  # fmt: skip
def test_gpt_j_pairs_are_rotated_as_its_function_rotates_them(dtype, together, heads, positions):
    """The wrapper called as the server's binder calls it for GPT-J (x_seq_major, sin, cos) on the rotary dims sliced
    off 24-wide heads: bit for bit the function's answer, in its shape."""
    interpreter_rounding.install()
    config = template.search_configs("rope_pairs_angles")[0]
    config.params.update(heads=heads, together=together, positions=positions)
    op = _op(config)
    gen = torch.Generator().manual_seed(24)
    x = torch.randn(2, 5, 4, 24, generator=gen).to(dtype)[..., :16]  # (batch, seq, heads, rotary dims): a view
    theta = torch.rand(2, 5, 8, generator=gen) * 6
    sin, cos = theta.sin().to(dtype), theta.cos().to(dtype)
    got, want = op(x_seq_major=x, sin=sin, cos=cos), gptj.apply_rotary_pos_emb(x, sin, cos)
    assert got.shape == want.shape and torch.equal(got, want)


def test_a_dispatch_reads_cos_alike_in_both_launches():
    small = template.search_configs("rope_half_angles")[2]
    config = template.combine(small, template.search_configs("rope_half_angles")[0], limit=8)
    source, plan = template.render(config), template.plan(config)
    kernels = check_kernel_source(source).kernels
    assert family("rotary").check_plan(plan, kernels) == []
    plan.launches[0].constexprs[rotary.ANGLES] = "0"
    [finding] = family("rotary").check_plan(plan, kernels)
    assert "ANGLES is 0 or 1 (cos of one angle a pair), the same in every launch: ['0', '1']" in finding.reason


def test_a_seq_major_live_shape_is_read_heads_major():
    """The judge draws q as (batch, heads, seq, dim): a call passing (batch, seq, heads, dim) is told by cos's seq."""
    assert rotary.heads_major((1, 7, 32, 64), (1, 7, 64)) == (1, 32, 7, 64)  # seq-major (unsqueeze_dim=2)
    assert rotary.heads_major((1, 1, 32, 64), (1, 1, 64)) == (1, 32, 1, 64)  # seq-major at decode
    assert rotary.heads_major((1, 32, 7, 64), (1, 7, 64)) == (1, 32, 7, 64)  # heads-major as it is
    assert rotary.heads_major((1, 8, 8, 64), (1, 8, 64)) == (1, 8, 8, 64)  # heads == seq: nothing says otherwise
    assert rotary.heads_major((1, 32, 7, 64), ()) == (1, 32, 7, 64)  # no cos recorded (before schema 8)


def test_the_wrapper_refuses_what_it_cannot_rotate_with_a_clear_message():
    op = _op(template.search_configs("rope_half")[0])
    q, k, cos, sin = _operands("rope_half", torch.float32)
    with pytest.raises(ValueError, match="unsqueeze_dim 1 or 2"):
        op(q, k, cos, sin, unsqueeze_dim=3)
    with pytest.raises(ValueError, match=r"do not fit together"):  # (batch, heads, seq, dim) passed as seq-major
        op(q, k, cos, sin, unsqueeze_dim=2)
    with pytest.raises(ValueError, match=r"rope takes q and k of \(batch, heads, seq, head_dim\)"):
        op(q[0], k[0], cos, sin, unsqueeze_dim=2)
    with pytest.raises(TypeError, match="rope takes tensors"):
        op(None, k, cos, sin, unsqueeze_dim=2)
    with pytest.raises(ValueError, match=r"do not fit together"):
        op(q, k[:, :, :3], cos, sin)
    with pytest.raises(ValueError, match="head_dim"):
        op(q[..., :15], k[..., :15], cos[..., :15], sin[..., :15])
    with pytest.raises(ValueError, match=r"do not fit together"):  # a rotary width narrower than the head
        op(q, k, cos[..., :8], sin[..., :8])  # is the partial plan's alone
    partial = _op(template.search_configs("rope_pairs_partial")[0])
    with pytest.raises(ValueError, match=r"do not fit together"):
        partial(q[..., :8], k[..., :8], cos, sin)  # nor wider than the head
    with pytest.raises(ValueError, match="rotary width 5 must be even"):
        partial(q, k, cos[..., :5], sin[..., :5])


def test_a_grid_over_blocks_of_positions_must_tell_its_kernel_the_block():
    """A grid over (head, block of N positions) launches N positions a program only where the kernel is told
    POSITIONS = N: a plan where the two disagree would leave positions unrotated (or rotate some twice), and is
    refused; so is one whose program would rotate q's and k's head at once."""
    config = template.search_configs("rope_half")[0]
    config.params.update(positions=16, together=0)
    source, plan = template.render(config), template.plan(config)
    assert plan.launches[0].grid == "cdiv(positions, 16) * heads" and plan.launches[0].constexprs["POSITIONS"] == "16"
    kernels_of = check_kernel_source(source).kernels
    assert rotary.check_plan(plan, kernels_of) == []
    for grid, told in (
        ("cdiv(positions, 8) * heads", "16"),
        ("2 * positions", "16"),
        ("cdiv(positions, 16) * heads", None),
    ):
        wrong = pb.LaunchPlan()
        wrong.CopyFrom(plan)
        wrong.launches[0].grid = grid
        if told is None:
            del wrong.launches[0].constexprs["POSITIONS"]
        [finding] = rotary.check_plan(wrong, kernels_of)
        assert finding.rule_id == "launch-plan" and "sets POSITIONS = N" in finding.reason
    wrong.launches[0].grid = "cdiv(positions, 512) * heads"
    [finding] = rotary.check_plan(wrong, kernels_of)
    assert "N 1..256" in finding.reason
    both = pb.LaunchPlan()
    both.CopyFrom(plan)
    both.launches[0].constexprs["TOGETHER"] = "1"
    [finding] = rotary.check_plan(both, kernels_of)
    assert "not both" in finding.reason
    config.params.update(together=1)
    assert not template.valid(config)


class _Counted:
    """A kernel that counts its launches and launches as the kernel does (kernel[grid](...))."""

    def __init__(self, kernel):
        self.kernel, self.launches = kernel, 0

    def __getitem__(self, grid):
        self.launches += 1
        return self.kernel[grid]


def test_a_dispatch_by_position_count_launches_each_side_with_its_own_shape():
    """Calls of at most the limit's positions go to the first launch (a program per head at 16 positions), longer
    ones to the second (a program per position rotating q and k): bit-exact on both sides."""
    interpreter_rounding.install()
    configs = template.search_configs("rope_half")
    op = _op(template.combine(configs[2], configs[0], limit=4))
    small, large = (_Counted(launcher.kernel) for launcher in op.launchers)
    op.launchers[0].kernel, op.launchers[1].kernel = small, large
    for seq, used in ((2, small), (5, large)):  # batch 2: 4 positions, then 10
        q, k, cos, sin = _operands("rope_half", torch.bfloat16, seq=seq)
        before = used.launches
        got, want = op(q, k, cos, sin), qwen2.apply_rotary_pos_emb(q, k, cos, sin)
        assert used.launches == before + 1
        assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
    assert small.launches == large.launches == 1


def test_a_dispatch_plan_is_two_launches_with_a_limit_and_the_same_arguments():
    configs = template.search_configs("rope_half")
    config = template.combine(configs[2], configs[0], limit=4096)
    source, plan = template.render(config), template.plan(config)
    kernels_of = check_kernel_source(source).kernels
    assert [launch.max_rows for launch in plan.launches] == [4096, 0] and rotary.check_plan(plan, kernels_of) == []
    for limits, why in (([0, 0], "max_rows [0, 0]"), ([4096, 8], "max_rows [4096, 8]"), ([9000, 0], "1..8192")):
        wrong = pb.LaunchPlan()
        wrong.CopyFrom(plan)
        for launch, limit in zip(wrong.launches, limits, strict=True):
            launch.max_rows = limit
        [finding] = rotary.check_plan(wrong, kernels_of)
        assert why in finding.reason
    wrong = pb.LaunchPlan()
    wrong.CopyFrom(plan)
    wrong.launches[1].args.pop()  # contiguous outputs on one side, the projections' layout on the other
    [finding] = rotary.check_plan(wrong, kernels_of)
    assert "the same runtime arguments" in finding.reason
    wrong.CopyFrom(plan)
    wrong.launches[1].constexprs["TOGETHER"] = "0"  # a program a position for q alone: k never rotated
    [finding] = rotary.check_plan(wrong, kernels_of)
    assert "TOGETHER=0" in finding.reason and "(grid 2 * positions, TOGETHER 0)" in finding.reason
    with pytest.raises(ValueError, match="dispatch_positions 1..8192"):
        template.combine(configs[2], configs[0], limit=10_000)
