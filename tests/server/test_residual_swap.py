"""The residual-norm family's kernel (Triton, interpreted on CPU) as a rewrite of a live decoder layer: parity on
its cache-free calls and the canary, a shadow check that never keeps a call carrying the request's KV cache, and a
kernel that fails after the attention has run answering the call without running the layer twice."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from services.coder.templates import add_norm
from services.core.kernels import candidate_wrapper
from services.core.pb import events_pb2 as pb
from services.ops import residual_norm
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
async def test_a_committed_layer_swap_serves_the_same_tokens_and_samples_no_cached_call(preset):
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
        assert engine.decode(ids, 8)[0] == before  # every decode step's layer call carries the KV cache
        assert not handle.samples and handle.calls > 0  # none kept: a replay would append to the request's cache
        await engine.exclusive(engine.forward_without_cache, ids)
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
