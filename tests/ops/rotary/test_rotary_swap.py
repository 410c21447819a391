"""The rotary family's kernel (Triton, interpreted) swapped in as a function: the modeling file's RoPE global
replaced, parity on the function's recorded live calls and the canary's tokens, and the original put back."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from services.core.kernels import candidate_wrapper
from services.core.pb import events_pb2 as pb
from services.ops import rotary
from services.ops.rotary import template
from services.server.engine import Engine
from services.server.functions import function_params, model_functions, site_of
from services.server.models import load_model
from services.server.parity import swap_with_parity


@pytest.mark.parametrize(
    ("preset", "variant"),
    [("tiny-qwen2", "rope_half"), ("tiny-llama", "rope_half"), ("tiny-gemma", "rope_half"),
     ("tiny-cohere", "rope_interleaved"), ("tiny-mistral", "rope_half"), ("tiny-qwen3", "rope_half"),
     ("tiny-glm", "rope_pairs_partial"), ("tiny-gptneox", "rope_half_partial"),
     ("tiny-gemma4", "rope_half")],  # Gemma 4's rotates one tensor a call: x as q, no k
)  # fmt: skip
async def test_the_rope_kernel_swaps_in_as_a_function_with_parity_and_reverts_exactly(preset, variant):
    engine = Engine(load_model(preset, "cpu"))
    try:
        observation = await engine.capture_profile(["Hello there"], 4)  # records the live calls for parity
        [(target, found)] = model_functions(engine.model).items()
        assert found.variant == variant and target.endswith(".apply_rotary_pos_emb")
        # the profile records cos's shape: its last dim is the rotary width the judge draws cos at
        [profile] = [m for m in observation.modules if m.introspection.class_path == target]
        config = engine.model.config
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        rotary_dim = int(head_dim * (config.rope_parameters or {}).get("partial_rotary_factor", 1.0))
        assert profile.third_shape[-1] == rotary_dim and profile.input_shape[-1] == head_dim
        assert rotary_dim == head_dim or variant in rotary.PARTIAL_VARIANTS
        site = site_of(target)
        original = site.current
        assert len(engine.live_inputs[target]) >= 2  # prefill and decode calls
        assert dict(profile.roles) == found.roles and bool(found.roles) == (preset == "tiny-gemma4")
        assert not profile.second_shape if found.roles else profile.second_shape[-1] == head_dim  # k's, where it has k
        contract = rotary.function_contract(target, function_params(original), found.roles)
        config = template.search_configs(variant)[0]
        entry = candidate_wrapper(Path(tempfile.mkdtemp()), template.render(config), template.plan(config))
        observed = pb.ParityObservation()
        handle = await engine.exclusive(swap_with_parity, engine, contract, entry, engine.encode("Hello"), observed)
        assert handle is not None, observed.error
        assert site.current is not original and observed.modules_matched == 1
        introspection, instances, patched = engine.module_state(target)  # what GetModuleState answers
        assert (instances, patched, introspection.leaf) == (1, 1, True) and introspection.forward_params
        assert model_functions(engine.model) == {target: found}  # still found (and profiled) while swapped
        assert observed.activations_passed == observed.activations_checked > 0 and observed.profile_inputs_checked >= 2
        assert observed.max_abs_err == 0.0  # bit for bit, as the HF function
        assert list(observed.canary_tokens_before) == list(observed.canary_tokens_after)
        ids = engine.encode("Hello there")
        swapped = engine.decode(ids, 8)[0]
        await engine.exclusive(engine.revert, handle)
        assert site.current is original and engine.module_state(target)[1:] == (1, 0)
        assert engine.module_state(target + "_nowhere") is None
        assert engine.decode(ids, 8)[0] == swapped
    finally:
        engine.close()


def test_a_function_of_other_parameters_gets_no_contract():
    assert rotary.function_contract("m.f", ["q", "k"]) is None
    contract = rotary.function_contract("m.f", ["query", "key", "c", "s"])
    assert contract.kind == "function" and list(contract.entry_inputs) == ["q", "k", "cos", "sin"]
