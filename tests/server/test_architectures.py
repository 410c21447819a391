"""Architectures beyond Qwen2/Llama, from configs (random weights): what the profile records and what swaps."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from services.core.kernels import candidate_wrapper
from services.core.pb import events_pb2 as pb
from services.ops import gated_mlp, plain_mlp, residual_norm, rotary
from services.ops.gated_mlp import template as gated
from services.ops.plain_mlp import template as mlp_act
from services.ops.residual_norm import template as add_norm
from services.ops.rotary import template as rotary_template
from services.ops.row_reduction import template as rmsnorm
from services.ops.row_reduction.contract import derive_contract
from services.profiler.domain import choose_target, choose_targets
from services.profiler.roofline import op_family, rank
from services.server import models
from services.server.engine import Engine
from services.server.functions import function_params, site_of
from services.server.models import load_model, tiny_sizes
from services.server.parity import swap_with_parity

pytestmark = pytest.mark.slow  # every architecture built, profiled and swapped

QWEN3_NORM = "transformers.models.qwen3.modeling_qwen3.Qwen3RMSNorm"
ROPE_FN = "apply_rotary_pos_emb"  # the modeling file's function, recorded with what it computes too
ROPE = {ROPE_FN: "rope_half"}


async def test_qwen3s_norm_class_of_two_widths_is_recognised_and_swaps_on_both():
    """Qwen3RMSNorm serves per-head q/k norms (width 16 here, 128 in the real model) beside the hidden-size
    norms (64): the profile describes an instance of the width its dominant calls have, so the class is a
    row reduction; the kernel then serves every instance, and parity checks it at both widths."""
    engine = Engine(load_model("tiny-qwen3", "cpu"))
    try:
        observation = await engine.capture_profile(["Hello there"], 6)
        norm = next(m for m in observation.modules if m.introspection.class_path == QWEN3_NORM)
        weight = next(a for a in norm.introspection.attributes if a.name == "weight")
        assert list(weight.shape) == [norm.input_shape[-1]] == [64] and norm.instances == 9
        assert op_family(norm) == "row_reduction"

        widths = {call.args[0].shape[-1] for call in engine.live_inputs[QWEN3_NORM]}
        assert widths == {16, 64}  # parity will replay both
        config = rmsnorm.search_configs()[0]
        entry = candidate_wrapper(Path(tempfile.mkdtemp()), rmsnorm.render(config), rmsnorm.plan(config))
        observed = pb.ParityObservation()
        handle = await engine.exclusive(
            swap_with_parity, engine, derive_contract(norm.introspection), entry, engine.encode("Hello"), observed
        )
        assert handle is not None, observed.error
        assert observed.modules_matched == 9 and observed.activations_passed == observed.activations_checked > 9
        assert observed.profile_inputs_checked >= 2
        assert list(observed.canary_tokens_before) == list(observed.canary_tokens_after)
        await engine.exclusive(engine.revert, handle)
    finally:
        engine.close()


@pytest.mark.parametrize(
    ("preset", "norm", "computes", "mlp"),
    [
        ("tiny-qwen2", "Qwen2RMSNorm", "rmsnorm", {"Qwen2MLP": "swiglu", "Qwen2DecoderLayer": "add_rmsnorm", **ROPE}),
        ("tiny-llama", "LlamaRMSNorm", "rmsnorm", {"LlamaMLP": "swiglu", "LlamaDecoderLayer": "add_rmsnorm", **ROPE}),
        ("tiny-qwen3", "Qwen3RMSNorm", "rmsnorm", {"Qwen3MLP": "swiglu", "Qwen3DecoderLayer": "add_rmsnorm", **ROPE}),
        (
            "tiny-gemma",
            "GemmaRMSNorm",
            "rmsnorm_offset",
            {"GemmaMLP": "geglu_tanh", "GemmaDecoderLayer": "add_rmsnorm_offset", **ROPE},
        ),
        # Cohere's layer is a parallel block (one norm, attention and MLP side by side): no residual norm to fuse
        ("tiny-cohere", "CohereLayerNorm", "layernorm_no_bias", {"CohereMLP": "swiglu", ROPE_FN: "rope_interleaved"}),
        # its MLP is a plain one (two maps and gelu_new), no RoPE
        ("tiny-gpt2", "LayerNorm", "layernorm", {"GPT2Block": "add_layernorm", "GPT2MLP": "mlp_gelu_tanh"}),
        (
            "tiny-mistral",
            "MistralRMSNorm",
            "rmsnorm",
            {"MistralMLP": "swiglu", "MistralDecoderLayer": "add_rmsnorm", **ROPE},
        ),
    ],
)
async def test_each_architectures_norm_is_recorded_with_what_it_computes_and_its_kernel_swaps_in(
    preset, norm, computes, mlp
):
    """The profile records what each norm and MLP was seen computing; the template writes each norm (rmsnorm, Gemma's
    rmsnorm_offset, Cohere's bias-free LayerNorm, GPT-2's LayerNorm with its bias), and its kernel swaps in with
    parity and the same greedy tokens; the MLP's kernel then swaps in beside it (SwiGLU, Gemma's GeGLU, GPT-2's
    plain MLP with gelu_new), and so does the decoder layer's residual add fused with its post norm (every pre-norm
    layer; not Cohere's parallel block), each with the same tokens again — and every architecture serves through
    the batched lane with its eager tokens."""
    engine = Engine(load_model(preset, "cpu"))
    try:
        observation = await engine.capture_profile(["Hello there"], 4)
        found = {m.introspection.class_path.rsplit(".", 1)[-1]: m.computes for m in observation.modules if m.computes}
        # the norm, the gated MLP (a layer, with the roles of its children) and the RoPE function
        assert found == {norm: computes, **mlp} and all(m.probed for m in observation.modules)
        for rope in (m for m in observation.modules if m.introspection.class_path.endswith(f".{ROPE_FN}")):
            config = engine.model.config  # q's heads first, then k's: the judge times GQA as served
            assert rope.input_shape[1] == config.num_attention_heads
            assert rope.second_shape[1] == getattr(config, "num_key_value_heads", config.num_attention_heads)
        ranking = rank(observation)
        first, reason = choose_target(ranking)
        # the norm is among the run's targets (which of norm and MLP ranks first is the profile's timing's call)
        targets = choose_targets(ranking, first)
        [target] = [t for t in targets if t.endswith(f".{norm}")] or [reason]
        # the template's kernel for what it computes swaps in with parity, greedy tokens unchanged
        profile = next(m for m in observation.modules if m.introspection.class_path == target)
        config = rmsnorm.search_configs(rmsnorm.variant_for(profile.computes))[0]
        entry = candidate_wrapper(Path(tempfile.mkdtemp()), rmsnorm.render(config), rmsnorm.plan(config))
        observed = pb.ParityObservation()
        contract = derive_contract(profile.introspection)
        handle = await engine.exclusive(swap_with_parity, engine, contract, entry, engine.encode("Hi"), observed)
        assert handle is not None, observed.error
        assert observed.activations_passed == observed.activations_checked > 0
        assert list(observed.canary_tokens_before) == list(observed.canary_tokens_after)
        assert len(set(observed.canary_tokens_before)) > 1  # the canary's tokens vary: equal means something
        for layer, variant in mlp.items():
            if layer == ROPE_FN:
                continue  # a function, swapped in tests/ops/rotary/test_rotary_swap.py
            # the gated (or plain) MLP's and the decoder layer's residual norm kernels too, each beside the norm's,
            # bound as the coder binds them
            profile = next(m for m in observation.modules if m.introspection.class_path.endswith(f".{layer}"))
            intro = profile.introspection
            ops, template = next(
                (f, t) for f, t in ((residual_norm, add_norm), (plain_mlp, mlp_act), (gated_mlp, gated))
                if variant in f.VARIANTS
            )  # fmt: skip
            layer_contract = ops.layer_contract(intro.class_path, intro.forward_params, profile.roles)
            config = template.search_configs(variant)[0]
            entry = candidate_wrapper(Path(tempfile.mkdtemp()), template.render(config), template.plan(config))
            both = pb.ParityObservation()
            mlp_handle = await engine.exclusive(
                swap_with_parity, engine, layer_contract, entry, engine.encode("Hi"), both
            )
            assert mlp_handle is not None, both.error
            assert both.activations_passed == both.activations_checked > 0
            assert list(both.canary_tokens_after) == list(observed.canary_tokens_before)
            await engine.exclusive(engine.revert, mlp_handle)
        await engine.exclusive(engine.revert, handle)
        ids = engine.encode("Hello there")
        served = [t async for chunk in engine.generate(ids, 8, stop_at_eos=False) for t in chunk]
        assert served == engine.decode(ids, 8)[0] and engine.lane_problem is None
    finally:
        engine.close()


def _template_and_contract(profile: pb.ModuleClassProfile):
    """The coder's template and contract for what a profiled module or function computes."""
    intro = profile.introspection
    if profile.computes in rotary.VARIANTS:
        contract = rotary.function_contract(
            intro.class_path, function_params(site_of(intro.class_path).current), profile.roles
        )
        return rotary_template, contract
    from services import ops as registry

    owner = registry.family_of(profile.computes)
    if owner and registry.family(owner).KIND == "layer":  # every layer family's template, through the registry
        return registry.template(owner), registry.template(owner).contract_for(intro, profile)
    return rmsnorm, derive_contract(intro)


@pytest.mark.parametrize(
    ("preset", "expected"),
    [
        # LayerNorms with a bias, a pre-norm layer (its add fused with the post norm), a plain MLP of Linear maps
        ("tiny-starcoder2", {"LayerNorm": "layernorm", "Starcoder2DecoderLayer": "add_layernorm",
                             "Starcoder2MLP": "mlp_gelu_tanh", ROPE_FN: "rope_half"}),
        # a parallel block (no residual norm to fuse), fc1 -> gelu_new -> fc2, RoPE on half of each head
        ("tiny-phi", {"LayerNorm": "layernorm", "PhiMLP": "mlp_gelu_tanh", ROPE_FN: "rope_half"}),
        # norms after attention and MLP (the add follows the norm: no residual norm), q/k norms of the full width
        ("tiny-olmo2", {"Olmo2RMSNorm": "rmsnorm", "Olmo2MLP": "swiglu", ROPE_FN: "rope_half"}),
        # the residual add scales the attention output by 0.22: no residual norm either
        ("tiny-granite", {"GraniteRMSNorm": "rmsnorm", "GraniteMLP": "swiglu", ROPE_FN: "rope_half"}),
        # gate and up fused in one projection, chunked: a gated MLP of two roles; a pre-norm layer whose adds go
        # through dropouts (identity when serving)
        ("tiny-phi3", {"Phi3RMSNorm": "rmsnorm", "Phi3MLP": "swiglu", "Phi3DecoderLayer": "add_rmsnorm",
                       ROPE_FN: "rope_half_partial"}),  # its function splits the head at cos's width (all of it here)
        # the same fused MLP; its RoPE rotates (even, odd) pairs over half of each head, the rest passed through
        ("tiny-glm", {"GlmRMSNorm": "rmsnorm", "GlmMLP": "swiglu", "GlmDecoderLayer": "add_rmsnorm",
                      ROPE_FN: "rope_pairs_partial"}),
        # GLM-4: the same RoPE and MLP in a sandwich layer (norms after attention and MLP too): no residual norm
        ("tiny-glm4", {"Glm4RMSNorm": "rmsnorm", "Glm4MLP": "swiglu", ROPE_FN: "rope_pairs_partial"}),
        # Pythia: LayerNorms with a bias, a parallel block, a plain GELU MLP, rotate_half on a quarter of each head
        ("tiny-gptneox", {"LayerNorm": "layernorm", "GPTNeoXMLP": "mlp_gelu", "GPTNeoXLayer": "dual_layernorm",
                          ROPE_FN: "rope_half_partial"}),
        # Nemotron: LayerNorm1P (torch's LayerNorm of 1 + weight), its layer's add fused with it, a plain relu² MLP,
        # RoPE on half of each head
        ("tiny-nemotron", {"NemotronLayerNorm1P": "layernorm_offset", "NemotronDecoderLayer": "add_layernorm_offset",
                           "NemotronMLP": "mlp_relu2", ROPE_FN: "rope_half_partial"}),
        # Gemma 4: RoPE in a function of one tensor (q, then k), per-head q/k/v norms beside the hidden ones (v's
        # without a weight), sandwich norms (no residual norm), a GELU-tanh gated MLP
        ("tiny-gemma4", {"Gemma4RMSNorm": "rmsnorm", "Gemma4TextMLP": "geglu_tanh", ROPE_FN: "rope_half"}),
    ],
)  # fmt: skip
async def test_architectures_beyond_the_list_are_recognised_by_what_they_compute_and_each_op_swaps(preset, expected):
    """No per-model code: each op is found by running it, layers whose dataflow is not a residual add into the post
    norm are not taken for one (never a wrong swap), and every op found swaps in alone with parity on the live
    weights and the same greedy tokens, then reverts."""
    await _each_op_found_swaps(preset, expected)


def _config(name: str, **changes):
    """A tiny config of transformers' `name` (the presets' sizes, `changes` applied; a None drops a key)."""

    def build():
        import transformers

        kwargs = {**tiny_sizes(), **changes}
        return getattr(transformers, name)(
            pad_token_id=0, bos_token_id=0, eos_token_id=0, **{k: v for k, v in kwargs.items() if v is not None}
        )

    return build


GPTJ_SIZES = dict(hidden_size=None, intermediate_size=None, num_hidden_layers=None, num_attention_heads=None,
                  num_key_value_heads=None, max_position_embeddings=None, rms_norm_eps=None,
                  n_embd=64, n_layer=2, n_head=4, rotary_dim=8, n_positions=512)  # fmt: skip


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        # Persimmon: LayerNorms with a bias, its add fused with the post norm, a plain relu² MLP of biased maps
        (_config("PersimmonConfig", rms_norm_eps=None, num_key_value_heads=None),
         {"LayerNorm": "layernorm", "PersimmonDecoderLayer": "add_layernorm", "PersimmonMLP": "mlp_relu2",
          ROPE_FN: "rope_half"}),
        # Arcee: Llama's layer with an up -> relu² -> down MLP
        (_config("ArceeConfig"), {"ArceeRMSNorm": "rmsnorm", "ArceeDecoderLayer": "add_rmsnorm",
                                  "ArceeMLP": "mlp_relu2", ROPE_FN: "rope_half"}),
        # Command R7B: a parallel block, a bias-free LayerNorm, interleaved RoPE
        (_config("Cohere2Config", rms_norm_eps=None), {"Cohere2LayerNorm": "layernorm_no_bias",
                                                       "Cohere2MLP": "swiglu", ROPE_FN: "rope_interleaved"}),
        # StableLM: LayerNorms with a bias around a gated MLP, RoPE on a quarter of each head (split outside)
        (_config("StableLmConfig", rms_norm_eps=None),
         {"LayerNorm": "layernorm", "StableLmDecoderLayer": "add_layernorm", "StableLmMLP": "swiglu",
          ROPE_FN: "rope_half"}),
        # OLMoE: its experts are no MLP these families write (recorded as nothing); its layer and norms are
        (_config("OlmoeConfig", num_experts=4, num_experts_per_tok=2),
         {"OlmoeRMSNorm": "rmsnorm", "OlmoeDecoderLayer": "add_rmsnorm", ROPE_FN: "rope_half"}),
        # GPT-J: a parallel block; its RoPE function rotates one seq-major tensor (the rotary dims sliced off each
        # head), taking (tensor, sin, cos) of one angle a pair over (even, odd) pairs
        (_config("GPTJConfig", **GPTJ_SIZES), {"LayerNorm": "layernorm", "GPTJMLP": "mlp_gelu_tanh",
                                               ROPE_FN: "rope_pairs_angles"}),
        # GPT-OSS: RoPE with cos and sin of one angle a pair (half the head wide); its experts are no MLP written
        # its layer's MLP answers (output, router scores), the layer keeping the output: its add still fuses
        (_config("GptOssConfig"), {"GptOssRMSNorm": "rmsnorm", "GptOssDecoderLayer": "add_rmsnorm",
                                   ROPE_FN: "rope_half_angles"}),
        # ModernBERT's decoder: a bias-free LayerNorm, a gated MLP of torch's exact GELU (erf) over one fused map
        (_config("ModernBertDecoderConfig"), {"LayerNorm": "layernorm_no_bias", "ModernBertDecoderMLP": "geglu",
                                              ROPE_FN: "rope_half"}),
        # Qwen3.5: three linear-attention layers (their mixer answers a tensor) to one of full attention, each
        # layer's forward requiring its position embeddings; (1 + weight) RMSNorms, RoPE on part of each head
        (_config("Qwen3_5TextConfig", num_hidden_layers=4),
         {"Qwen3_5RMSNorm": "rmsnorm_offset", "Qwen3_5DecoderLayer": "add_rmsnorm_offset", "Qwen3_5MLP": "swiglu",
          ROPE_FN: "rope_half_partial"}),
        # FalconMamba: an RMSNorm, and a weightless one whose dt instance is built at the intermediate width and called
        # at the time-step rank's (its weight unused): recognised at its weight's width, never at its calls' (nothing)
        (_config("FalconMambaConfig"), {"FalconMambaRMSNorm": "rmsnorm"}),
    ],
    ids=["persimmon", "arcee", "cohere2", "stablelm", "olmoe", "gptj", "gpt-oss", "modernbert-decoder", "qwen3.5",
         "falcon-mamba"],
)  # fmt: skip
async def test_architectures_without_a_preset_are_recognised_and_each_op_swaps(monkeypatch, build, expected):
    """The same from configs no preset names (a model of any of these architectures served from a local path)."""
    monkeypatch.setitem(models.PRESETS, "tiny-unlisted", (build, "float32"))
    await _each_op_found_swaps("tiny-unlisted", expected)


async def _each_op_found_swaps(preset: str, expected: dict) -> None:
    engine = Engine(load_model(preset, "cpu"))
    try:
        observation = await engine.capture_profile(["Hello there"], 4)
        profiles = {m.introspection.class_path.rsplit(".", 1)[-1]: m for m in observation.modules if m.computes}
        assert {name: p.computes for name, p in profiles.items()} == expected
        ids = engine.encode("Hello there")
        before = engine.decode(ids, 8)[0]
        assert len(set(before)) > 1
        for name, profile in profiles.items():
            template, contract = _template_and_contract(profile)
            if template.variant_for(profile.computes) is None:
                # recorded, not written: torch's exact GELU is one kernel already (nothing to fuse)
                assert profile.computes == "mlp_gelu", (name, profile.computes)
                continue
            config = template.search_configs(template.variant_for(profile.computes))[0]
            entry = candidate_wrapper(Path(tempfile.mkdtemp()), template.render(config), template.plan(config))
            observed = pb.ParityObservation()
            handle = await engine.exclusive(swap_with_parity, engine, contract, entry, engine.encode("Hi"), observed)
            assert handle is not None, (name, observed.error)
            assert observed.activations_passed == observed.activations_checked > 0, name
            assert list(observed.canary_tokens_before) == list(observed.canary_tokens_after), name
            assert engine.decode(ids, 8)[0] == before, name
            await engine.exclusive(engine.revert, handle)
    finally:
        engine.close()


async def test_a_model_the_batched_lane_cannot_call_is_served_alone(monkeypatch):
    """Bloom builds its ALiBi bias from a 2-D padding mask; the batched lane passes a 4-D causal one. Found at load by
    trying the lane (a two-token prefill and a step), not by its name: the lane is off with the model's own error,
    requests decode alone, and its norms are still found and swapped."""
    monkeypatch.setitem(models.PRESETS, "tiny-unlisted", (_config("BloomConfig"), "float32"))
    engine = Engine(load_model("tiny-unlisted", "cpu"))
    try:
        assert engine.decoder is None and engine.batcher is None
        assert engine.lane_problem.startswith("the model does not decode over slots (ValueError: too many values")
        ids = engine.encode("Hello there")
        served = [t async for chunk in engine.generate(ids, 6, stop_at_eos=False) for t in chunk]
        assert served == engine.decode(ids, 6)[0] and len(set(served)) > 1
    finally:
        engine.close()
    await _each_op_found_swaps("tiny-unlisted", {"LayerNorm": "layernorm"})


def test_a_model_that_cannot_decode_over_a_dynamic_cache_is_refused_at_load(monkeypatch):
    """MiniMax wants a cache of its own: every request would fail on either lane, so the engine refuses it at load
    with the model's own error (the server then exits with status 2, as for an unknown model)."""
    from services.server.engine import ModelNotServable

    monkeypatch.setitem(models.PRESETS, "tiny-unlisted", (_config("MiniMaxConfig"), "float32"))
    loaded = load_model("tiny-unlisted", "cpu")
    with pytest.raises(ModelNotServable, match=r"tiny-unlisted does not decode over a dynamic cache here \(ValueError: "
                                               r"MiniMax uses cache of its own"):  # fmt: skip
        Engine(loaded)


# Windows and chunks smaller than the test's slots, so that they bind; prompts and generations cross them.
WINDOW = 8


@pytest.mark.parametrize(
    "build",
    [
        # sliding-window layers beside full ones (a ring each), the mask a dict by kind
        _config("Gemma2Config", head_dim=16, sliding_window=WINDOW, tie_word_embeddings=False),
        _config("Gemma3TextConfig", head_dim=16, sliding_window=WINDOW, tie_word_embeddings=False),
        _config("Exaone4Config", sliding_window=WINDOW, sliding_window_pattern=2),
        # every layer sliding: one mask for all, a ring in every layer
        _config("MistralConfig", sliding_window=WINDOW),
        # chunked attention (Llama 4): a query sees its own chunk only
        _config("Llama4TextConfig", head_dim=16, attention_chunk_size=WINDOW, num_local_experts=1,
                num_experts_per_tok=1, interleave_moe_layer_step=2, no_rope_layers=[1, 0]),
        # a conv state (LFM2's short convs), Mamba states (Jamba), a gated delta net's conv and matrix (Qwen3.5)
        _config("Lfm2Config", num_hidden_layers=4, layer_types=["conv", "full_attention"] * 2),
        _config("JambaConfig", num_experts=1, attn_layer_period=2, attn_layer_offset=1, mamba_d_state=8),
        _config("Qwen3_5TextConfig", num_hidden_layers=4),
        # attention and Mamba side by side in every layer (Falcon-H1): keys and a state in one slot
        _config("FalconH1Config", head_dim=16, mamba_d_ssm=64, mamba_n_heads=4, mamba_d_head=16, mamba_d_state=8,
                mamba_chunk_size=16),
    ],
    ids=["gemma2", "gemma3", "exaone4", "mistral-window", "llama4-chunked", "lfm2", "jamba", "qwen3.5", "falcon-h1"],
)  # fmt: skip
async def test_architectures_whose_attention_is_not_full_are_batched_with_their_eager_tokens(monkeypatch, build):
    """The batched lane takes them at load (no refusal), and streams of different lengths decoding together, past
    the window or chunk, get the tokens each gets decoded alone (transformers' own dynamic cache)."""
    import asyncio

    import torch

    monkeypatch.setitem(models.PRESETS, "tiny-unlisted", (build, "float32"))
    engine = Engine(load_model("tiny-unlisted", "cpu"), slots=4, slot_tokens=64)
    try:
        assert engine.lane_problem is None and engine.batcher is not None
        gen = torch.Generator().manual_seed(0)
        prompts = [torch.randint(1, 500, (n,), generator=gen).tolist() for n in (3, 2 * WINDOW + 3, WINDOW - 1)]
        alone = [engine.decode(ids, 2 * WINDOW)[0] for ids in prompts]

        async def served(ids):
            return [t async for chunk in engine.generate(ids, 2 * WINDOW, stop_at_eos=False) for t in chunk]

        assert await asyncio.gather(*(served(ids) for ids in prompts)) == alone
    finally:
        engine.close()
