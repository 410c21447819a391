"""Roofline ranking, op families and fingerprints: hand-built observations and live modules."""

from __future__ import annotations

import math

import pytest
import torch
from transformers.models.gpt2.modeling_gpt2 import Conv1D
from transformers.models.llama.modeling_llama import LlamaRMSNorm
from transformers.models.qwen2.modeling_qwen2 import Qwen2Config, Qwen2MLP, Qwen2RMSNorm

from services.core import events as ev
from services.core.pb import events_pb2 as pb
from services.profiler import domain, roofline
from services.profiler.roofline import FINGERPRINT_DIM, op_family, rank, writable

H200 = pb.HardwareFigures(device="cuda", device_name="H200", peak_bytes_per_s=4.275e12, peak_flops=7.9e14)


def _cls(
    path: str,
    *,
    params: tuple = (),
    floats: tuple = (),
    leaf: bool = True,
    calls: int,
    time_us: float,
    shape: list[int],
    dtype: str = "bfloat16",
    in_b: int,
    out_b: int,
) -> pb.ModuleClassProfile:
    attrs = [pb.ModuleAttribute(name=n, kind="parameter", shape=s, dtype=dtype) for n, s in params]
    attrs += [pb.ModuleAttribute(name=n, kind="float", value=v) for n, v in floats]
    param_bytes = sum(math.prod(s) for _, s in params) * 2
    return pb.ModuleClassProfile(
        introspection=pb.ModuleIntrospection(class_path=path, attributes=attrs, leaf=leaf),
        instances=1,
        calls=calls,
        total_time_us=time_us,
        input_shape=shape,
        dtype=dtype,
        param_bytes=param_bytes,
        input_bytes=in_b,
        output_bytes=out_b,
    )


def _observation(prefix: str = "acme.models") -> pb.ProfileObservation:
    h = 1536
    return pb.ProfileObservation(
        model="acme-1.5b",
        dtype="bfloat16",
        hardware=H200,
        captured_time_us=10_000.0,
        decode_tokens_per_s=40.0,
        modules=[
            _cls(
                f"{prefix}.AcmeDecoder", leaf=False, calls=28, time_us=9_000, shape=[1, 1, h], in_b=2 * h, out_b=2 * h
            ),
            _cls(
                f"{prefix}.Linear",
                params=(("weight", [h, h]),),
                calls=200,
                time_us=6_100,
                shape=[1, 1, h],
                in_b=2 * h,
                out_b=2 * h,
            ),
            _cls(
                f"{prefix}.FancyNorm",
                params=(("weight", [h]),),
                floats=(("eps", 1e-6),),
                calls=113,
                time_us=900,
                shape=[1, 1, h],
                in_b=2 * h,
                out_b=2 * h,
            ),
            _cls(f"{prefix}.Act", calls=28, time_us=300, shape=[1, 1, 8960], in_b=2 * 8960, out_b=2 * 8960),
            _cls(
                f"{prefix}.Lookup",
                params=(("weight", [151936, h]),),
                calls=8,
                time_us=40,
                shape=[1, 1],
                in_b=8,
                out_b=2 * h,
            ),
            _cls(f"{prefix}.NeverCalled", params=(("weight", [h]),), calls=0, time_us=0, shape=[], in_b=0, out_b=0),
        ],
    )


def test_ranking_is_over_called_leaves_by_recoverable_time():
    ranking = rank(_observation())
    assert [t.class_path.rsplit(".", 1)[-1] for t in ranking] == ["Linear", "FancyNorm", "Act", "Lookup"]
    assert [t.fingerprint.op_family for t in ranking] == ["matmul", "row_reduction", "elementwise", "gather"]
    assert [t.supported for t in ranking] == [False, True, False, False]
    norm = ranking[1]
    assert norm.time_share == pytest.approx(0.09)
    floor = 113 * (3 * 2 * 1536) / 4.275e12 * 1e6  # input + output + weight at the copy ceiling
    assert norm.floor_us == pytest.approx(floor)
    assert norm.recoverable_us == pytest.approx(900 - floor)
    linear = ranking[0]
    per_call = max((2 * 2 * 1536 + 2 * 1536 * 1536) / 4.275e12, 2 * 1536 * 1536 / 7.9e14)
    assert linear.floor_us == pytest.approx(200 * per_call * 1e6)
    assert "no template for matmul" in linear.note


def test_fingerprint_is_physics_only():
    for target in rank(_observation()):
        fp = target.fingerprint
        blob = fp.SerializeToString()
        for name in (b"acme", b"Fancy", b"Linear", b"Lookup", b"Act", b"1.5b"):
            assert name not in blob
        assert len(fp.vector) == FINGERPRINT_DIM and all(math.isfinite(x) for x in fp.vector)
    norm = rank(_observation())[1].fingerprint
    assert (norm.row_width, norm.rows, norm.dtype_bytes, norm.memory_bound) == (1536, 1, 2, True)
    assert norm.arithmetic_intensity == pytest.approx(4 * 1536 / (3 * 2 * 1536))
    assert 0 < norm.achieved_fraction < 0.01  # eager at one row: launch-bound, nowhere near the ceiling


def test_same_physics_under_other_names_gives_the_same_fingerprints():
    a = rank(_observation("acme.models"))
    b = rank(_observation("other_vendor.nn"))
    assert [t.fingerprint.SerializeToString() for t in a] == [t.fingerprint.SerializeToString() for t in b]


def test_families_lie_far_apart_and_one_family_near():
    fams = {t.fingerprint.op_family: list(t.fingerprint.vector) for t in rank(_observation())}
    assert math.dist(fams["row_reduction"], fams["elementwise"]) > 2.5
    wide = roofline.fingerprint_vector("row_reduction", 0.67, 4096, 1, 2, True, 0.002)
    assert math.dist(fams["row_reduction"], wide) < 0.2  # a Llama-width norm is the same physics


def test_profile_captured_chooses_the_supported_target_and_says_why():
    req = ev.Recorded(1, ev.make_envelope("r1", pb.RunRequested(), producer="t", time_ns=0, event_id="req"))
    msg = domain.derive_profile_captured([req], req, _observation())
    assert msg.target_class == "acme.models.FancyNorm"
    assert msg.reason.startswith("matmul ranks first with 61% of the time but has no template")
    assert "chose row_reduction class FancyNorm: 9% of the time, 900 us recoverable" in msg.reason
    again = domain.REDERIVE["ProfileCaptured"]([req], req, msg)
    assert again.SerializeToString(deterministic=True) == msg.SerializeToString(deterministic=True)


def test_no_supported_family_means_no_target():
    obs = _observation()
    del obs.modules[2]  # the norm
    req = ev.Recorded(1, ev.make_envelope("r1", pb.RunRequested(), producer="t", time_ns=0, event_id="req"))
    msg = domain.derive_profile_captured([req], req, obs)
    assert msg.target_class == "" and "no leaf class is of a family with a template" in msg.reason
    empty = domain.derive_profile_captured([req], req, pb.ProfileObservation())
    assert empty.target_class == "" and "nothing to optimise" in empty.reason


def test_missing_hardware_figures_give_no_floor_but_still_rank():
    obs = _observation()
    obs.ClearField("hardware")
    ranking = rank(obs)
    assert all(t.floor_us == 0 and t.recoverable_us > 0 for t in ranking)
    assert "no copy ceiling" in ranking[0].note


# ---------------------------------------------------------------- live modules


def test_op_family_of_live_modules(profile_of):
    torch.manual_seed(0)
    x = torch.randn(1, 3, 64)
    ids = torch.randint(0, 100, (1, 3))
    cfg = Qwen2Config(hidden_size=64, intermediate_size=128)
    found = {
        "Qwen2RMSNorm": op_family(profile_of(Qwen2RMSNorm(64), x)),
        "LlamaRMSNorm bf16": op_family(profile_of(LlamaRMSNorm(64).to(torch.bfloat16), x.bfloat16())),
        "Linear": op_family(profile_of(torch.nn.Linear(64, 32), x)),
        "Linear 64->1024": op_family(profile_of(torch.nn.Linear(64, 1024, bias=False), x)),
        "GPT-2 Conv1D": op_family(profile_of(Conv1D(96, 64), x)),
        "Embedding (weights' dtype)": op_family(profile_of(torch.nn.Embedding(100, 64), ids)),
        "Embedding (int input)": op_family(profile_of(torch.nn.Embedding(100, 64), ids, int_dtype_as_is=True)),
        "SiLU": op_family(profile_of(torch.nn.SiLU(), x)),
        "Qwen2MLP (container)": op_family(profile_of(Qwen2MLP(cfg), x)),
        # weight AND bias: a different computation from the RMSNorm template, so not offered to it
        "LayerNorm": op_family(profile_of(torch.nn.LayerNorm(64), x)),
    }
    assert found == {
        "Qwen2RMSNorm": "row_reduction",
        "LlamaRMSNorm bf16": "row_reduction",
        "Linear": "matmul",
        "Linear 64->1024": "matmul",
        "GPT-2 Conv1D": "matmul",
        "Embedding (weights' dtype)": "gather",
        "Embedding (int input)": "gather",
        "SiLU": "elementwise",
        "Qwen2MLP (container)": "other",
        "LayerNorm": "other",
    }


def test_live_norm_fingerprint(profile_of):
    profile = profile_of(Qwen2RMSNorm(64).to(torch.bfloat16), torch.randn(2, 5, 64, dtype=torch.bfloat16))
    fp = roofline.fingerprint(profile, H200)
    assert (fp.op_family, fp.row_width, fp.rows, fp.dtype_bytes) == ("row_reduction", 64, 10, 2)
    assert fp.memory_bound and fp.arithmetic_intensity == pytest.approx(4 * 640 / (2 * 1280 + 128))


def test_a_probed_profile_is_decided_by_what_its_forward_computes(profile_of):
    """The server records what each class was seen computing (ProfileCaptured.observed.modules[].computes);
    a profile from before that (probed false) is decided by structure, as it was when it was recorded."""
    x = torch.randn(1, 3, 64)

    def probed(profile, computes: str):
        profile.probed, profile.computes = True, computes
        return profile

    rms = probed(profile_of(Qwen2RMSNorm(64), x), "rmsnorm")
    assert op_family(rms) == "row_reduction" and writable(rms, "row_reduction")
    # one weight and an epsilon like an RMSNorm, seen subtracting the mean (Cohere): its own variant
    cohere = probed(profile_of(Qwen2RMSNorm(64), x), "layernorm_no_bias")
    assert op_family(cohere) == "row_reduction" and writable(cohere, "row_reduction")
    # a LayerNorm with a bias (GPT-2): structure alone said "other"; seen running, the template's layernorm
    layer = probed(profile_of(torch.nn.LayerNorm(64), x), "layernorm")
    assert op_family(layer) == "row_reduction" and writable(layer, "row_reduction")
    # shaped like a norm, seen computing none of them: not a row reduction at all
    assert op_family(probed(profile_of(Qwen2RMSNorm(64), x), "")) == "other"
    unprobed = profile_of(Qwen2RMSNorm(64), x)
    assert op_family(unprobed) == "row_reduction" and writable(unprobed, "row_reduction")


def test_a_reason_names_the_writable_variants_of_its_schema():
    """A reason re-derives in the words of its schema: gated MLPs and RoPE named since 5, the residual norm and the
    plain MLP since 6, OLMo2's RMSNorm (its weight in fp32) since 7, the partial RoPE functions since 8, Nemotron's
    relu² and LayerNorm1P since 9, GPT-OSS's and GPT-J's RoPE of one angle a pair and the exact-GELU gated MLP
    since 10."""
    from services.profiler import catalogue

    at = {v: catalogue.writable_variants(pb.ProfileObservation(), v) for v in (4, 5, 6, 7, 8, 9, 10, 11)}
    assert at[11] == at[10]  # the last rung: a variant since is named only through a recorded catalogue
    assert "swiglu" not in at[4] and "swiglu" in at[5] and "add_rmsnorm" not in at[5] and "add_rmsnorm" in at[6]
    new = {"rmsnorm_fp32_weight", "add_rmsnorm_fp32_weight"}
    assert not new & set(at[6]) and new <= set(at[7])
    assert [v for v in at[7] if v not in new] == list(at[6])
    partial = {"rope_half_partial", "rope_pairs_partial"}
    assert not partial & set(at[7]) and partial <= set(at[8]) and [v for v in at[8] if v not in partial] == list(at[7])
    nemotron = {"mlp_relu2", "layernorm_offset", "add_layernorm_offset"}
    assert not nemotron & set(at[8]) and [v for v in at[9] if v not in nemotron] == list(at[8])
    assert nemotron <= set(at[9])
    since_10 = {"rope_half_angles", "rope_pairs_angles", "geglu"}
    assert not since_10 & set(at[9]) and [v for v in at[10] if v not in since_10] == list(at[9])
    assert since_10 <= set(at[10])


def test_a_profile_is_ranked_and_reasoned_against_the_catalogue_it_recorded(profile_of):
    """The catalogue is recorded, not versioned: a profile whose catalogue says the norms write nothing ranks its
    norm unsupported and its reason names what the catalogue names, whatever the code writes today; the live one is
    the registry's, and a profile without one reads the frozen catalogue (as every profile recorded before did)."""
    from services import ops
    from services.profiler import catalogue, domain

    profile = profile_of(Qwen2RMSNorm(64), torch.randn(2, 5, 64))
    profile.probed, profile.computes = True, "rmsnorm"
    observed = pb.ProfileObservation(modules=[profile], captured_time_us=2 * profile.total_time_us)
    live = catalogue.live()
    assert [c.family for c in live] == list(ops.FAMILIES) and all(list(c.writable) for c in live)
    frozen_families = {c.family: tuple(c.writable) for c in live if c.family in catalogue.FROZEN}
    assert frozen_families == catalogue.FROZEN  # the families frozen then write what they did (new ones: theirs)
    [ranked] = roofline.rank(observed)
    assert ranked.supported
    narrowed = pb.ProfileObservation()
    narrowed.CopyFrom(observed)
    narrowed.catalogue.extend([pb.FamilyCatalogue(family="row_reduction", writable=["layernorm"])])
    [unsupported] = roofline.rank(narrowed)
    assert not unsupported.supported and "no template for rmsnorm" in unsupported.note
    assert catalogue.writable_variants(narrowed, 11) == ("layernorm",)
    target, reason = domain.choose_target([unsupported], catalogue.writable_variants(narrowed, 11))
    assert target == "" and "the template writes layernorm only" in reason


@pytest.mark.parametrize(
    ("names", "target", "said"),
    [
        (["FancyNorm"], "acme.models.FancyNorm", "(the run asked for FancyNorm only)"),
        (["acme.models.FancyNorm", "Act"], "acme.models.FancyNorm", "asked for acme.models.FancyNorm, Act only"),
        (["Linear"], "", "no leaf class is of a family with a template"),  # named, but nothing writes it
        (["Nope"], "", "no profiled class is named Nope (the classes that ran: Linear, FancyNorm, Act, Lookup)"),
    ],
)
def test_a_run_asked_for_named_targets_works_on_those_alone(names, target, said):
    """`yantra optimize --target CLASS`: the profile ranks every class as ever; the run's targets come from the
    named ones (by the class's name or its full path), and a name no class had says which classes ran."""
    asked = pb.RunRequested(only_targets=names)
    req = ev.Recorded(1, ev.make_envelope("r1", asked, producer="t", time_ns=0, event_id="q"))
    msg = domain.derive_profile_captured([req], req, _observation())
    assert (msg.target_class, list(msg.targets)) == (target, [target] if target else []) and said in msg.reason
    assert [t.class_path.rsplit(".", 1)[-1] for t in msg.ranking] == ["Linear", "FancyNorm", "Act", "Lookup"]
    again = domain.REDERIVE["ProfileCaptured"]([req], req, msg)
    assert again.SerializeToString(deterministic=True) == msg.SerializeToString(deterministic=True)


@pytest.mark.parametrize(
    ("names", "said"),
    [([""], "target 1 of 1 is empty"), (["x" * 201], "a class path is at most 200"), (["A"] * 17, "at most 16")],
)
def test_named_targets_past_the_limits_are_refused_before_the_server_is_asked(names, said):
    assert said in domain.request_problem(pb.RunRequested(only_targets=names))
