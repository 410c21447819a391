"""The residual-norm family's kernel (Triton, interpreted on CPU) as a rewrite of a live decoder layer: parity on
its cache-free calls and the canary, a shadow check that keeps a request's prefill (without its KV cache) but never a
decode step's call, finds a kernel wrong only on long prompts, and a
kernel that fails after the attention has run answering the call without running the layer twice."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from transformers.cache_utils import Cache

from services.core.kernels import candidate_wrapper
from services.core.pb import events_pb2 as pb
from services.ops import residual_norm
from services.ops.residual_norm import template as add_norm
from services.server.engine import Engine
from services.server.introspection import class_path, instances_of
from services.server.models import load_model
from services.server.parity import swap_with_parity
from services.server.shadow import check_swap


def _entry(variant: str, source: str | None = None):
    config = add_norm.search_configs(variant)[0]
    return candidate_wrapper(Path(tempfile.mkdtemp()), source or add_norm.render(config), add_norm.plan(config))


def _layer_contract(engine: Engine) -> tuple[pb.Contract, str]:
    layer = next(m for m in engine.model.modules() if residual_norm.identify(m) is not None)
    return residual_norm.contract_for(layer, class_path(layer)), residual_norm.recognise(layer)


@pytest.mark.parametrize("preset", ["tiny-qwen2", "tiny-gpt2"])
async def test_a_committed_layer_swap_serves_the_same_tokens_and_samples_only_its_prefill(preset):
    engine = Engine(load_model(preset, "cpu"))
    try:
        await engine.capture_profile(["Hello there"], 4)  # records the layers' cache-free calls for parity
        contract, variant = _layer_contract(engine)
        ids = engine.encode("Hello there")
        before = engine.decode(ids, 8)[0]
        observed = pb.ParityObservation()
        handle = await engine.exclusive(
            swap_with_parity, engine, contract, _entry(variant), engine.encode("Hi"), observed
        )
        assert handle is not None, observed.error
        assert observed.modules_matched == len(instances_of(engine.model, contract.target)) == 2
        assert observed.activations_passed == observed.activations_checked > 0 and observed.profile_inputs_checked > 0
        assert list(observed.canary_tokens_before) == list(observed.canary_tokens_after)
        failures: list[str] = []
        handle.on_failure = failures.append  # committed
        assert engine.decode(ids, 8)[0] == before  # every layer call carries the request's KV cache
        # kept: the prefill's call (it started from an empty cache: the same computation without it), never a
        # decode step's (it attends to what the cache holds; replayed with it, it would append to it)
        [(_, args, kwargs)] = handle.samples
        assert args[0].shape[-2] == len(ids) and not any(isinstance(v, Cache) for v in kwargs.values())
        assert check_swap(handle) == "" and not failures
        await engine.exclusive(engine.forward_without_cache, ids * 3)  # rows of a size not seen yet
        assert handle.samples and check_swap(handle) == "" and not failures  # a cache-free call is replayed
        await engine.exclusive(engine.revert, handle)
        assert not any("forward" in m.__dict__ for m in instances_of(engine.model, contract.target))
    finally:
        engine.close()


async def test_a_kernel_failing_after_the_attention_answers_without_running_the_layer_twice():
    """The kernel cannot compile for the live width: the attention has already appended this step's keys and
    values to the cache, so the rewrite answers with torch's add and norm and the server reverts the swap; a
    fallback that ran the layer again would append them twice and move the next tokens."""
    engine = Engine(load_model("tiny-qwen2", "cpu"))
    try:
        contract, variant = _layer_contract(engine)
        ids = engine.encode("Hello there")
        before, before_logits = engine.decode(ids, 6, keep_logits=True)
        source = add_norm.render(add_norm.search_configs(variant)[0]).replace(
            "    first_row = tl.program_id(0) * ROWS",
            "    tl.static_assert(N_COLS < 2)\n    first_row = tl.program_id(0) * ROWS",
        )
        handle = await engine.exclusive(engine.apply, contract, _entry(variant, source))
        failures: list[str] = []
        handle.on_failure = failures.append  # committed without parity, as a kernel that broke later would be
        after, after_logits = engine.decode(ids, 6, keep_logits=True)
        assert len(failures) == 1 and "AssertionError" in failures[0], failures
        assert handle.reverted and not any("forward" in m.__dict__ for m in instances_of(engine.model, contract.target))
        assert after == before
        assert all(float((a - b).abs().max()) < 1e-4 for a, b in zip(after_logits, before_logits, strict=True))
    finally:
        engine.close()


async def test_a_layer_serving_the_kernel_is_still_recognised_for_what_it_computes():
    """A later profile (another run on the same server) still names the swapped layer's op: recognition runs the
    class's own forward, whose post norm the kernel's forward never calls."""
    engine = Engine(load_model("tiny-qwen2", "cpu"))
    try:
        contract, variant = _layer_contract(engine)
        handle = await engine.exclusive(engine.apply, contract, _entry(variant))
        layer = instances_of(engine.model, contract.target)[0]
        assert "forward" in layer.__dict__ and residual_norm.recognise(layer) == variant
        await engine.exclusive(engine.revert, handle)
    finally:
        engine.close()


async def test_a_layer_kernel_wrong_only_on_long_prompts_is_found_by_the_shadow_check():
    """Parity's short canary never meets the bug; a live prompt's prefill does, and the shadow check finds it on that
    very call (inline: the call's inputs without the KV cache, against the layer's own forward), answers it with the
    layer's own output and reverts the swap; the next tokens are the eager model's."""
    engine = Engine(load_model("tiny-qwen2", "cpu"))
    try:
        await engine.capture_profile(["Hello there"], 4)
        contract, variant = _layer_contract(engine)
        source = add_norm.render(add_norm.search_configs(variant)[0])
        wrong = source.replace("y = w * normed", "y = tl.where(n_rows > 16, 2.0 * w * normed, w * normed)")
        assert wrong != source
        long_ids = engine.encode("one two three four five six seven eight nine ten eleven twelve thirteen fourteen")
        assert len(long_ids) > 16
        lanes = [("eager", engine.decode, long_ids)]
        if engine.decoder is not None:  # the batched lane: a prefill into fresh slots
            lanes.append(("batched", engine.serve_decode, long_ids * 2))
        for lane, run, ids in lanes:
            before, before_logits = run(ids, 3, keep_logits=True)
            observed = pb.ParityObservation()
            handle = await engine.exclusive(
                swap_with_parity, engine, contract, _entry(variant, wrong), engine.encode("Hi"), observed
            )
            assert handle is not None, observed.error  # the canary and the profile's inputs are short: it passes
            failures: list[str] = []
            handle.commit(failures.append)
            assert check_swap(handle) == ""
            after, after_logits = run(ids, 3, keep_logits=True)
            assert len(failures) == 1 and "off the module's own forward on a live call" in failures[0], lane
            assert handle.reverted and handle.inline_checks == 1, lane
            assert after == before, lane
            assert all(float((a - b).abs().max()) < 1e-5 for a, b in zip(after_logits, before_logits, strict=True))
    finally:
        engine.close()


def test_a_layer_keeping_the_first_of_its_mlps_pair_is_recognised_and_one_using_the_second_is_not():
    """GPT-OSS's experts answer (output, router scores) and its layer keeps the output: still the residual add into
    the post norm. A layer that adds the scores too (or returns them) computes something else: not recognised."""
    import torch
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    class Experts(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(8, 8)

        def forward(self, h):
            return self.proj(h), self.proj(h).sum(-1, keepdim=True)

    class Layer(torch.nn.Module):
        def __init__(self, use_scores: bool):
            super().__init__()
            self.input_layernorm, self.post_attention_layernorm = LlamaRMSNorm(8), LlamaRMSNorm(8)
            self.self_attn, self.mlp, self.use_scores = torch.nn.Linear(8, 8), Experts(), use_scores

        def forward(self, hidden_states):
            attended = self.self_attn(self.input_layernorm(hidden_states))
            hidden_states = hidden_states + (attended[0] if isinstance(attended, tuple) else attended)
            out, scores = self.mlp(self.post_attention_layernorm(hidden_states))
            return hidden_states + out + (scores if self.use_scores else 0)

    assert residual_norm.identify(Layer(use_scores=False)) == (
        "add_rmsnorm",
        {"input_norm": "input_layernorm", "attention": "self_attn", "post_norm": "post_attention_layernorm",
         "mlp": "mlp"},
    )  # fmt: skip
    assert residual_norm.identify(Layer(use_scores=True)) is None


def test_a_layer_passing_its_attention_more_than_its_input_by_position_is_not_recognised():
    """CTRL's layer adds its attention into the post norm like a pre-norm layer, but calls the attention with
    (v, k, q, mask, ...) by position: the rewrite passes the normed input alone (and the layer's own keywords), so
    the swap would be refused at parity after a whole search. Not recognised."""
    from transformers import CTRLConfig
    from transformers.models.ctrl.modeling_ctrl import EncoderLayer

    config = CTRLConfig(n_embd=16, n_head=2, dff=32, n_layer=1, vocab_size=64)
    assert residual_norm.identify(EncoderLayer(config).eval()) is None
