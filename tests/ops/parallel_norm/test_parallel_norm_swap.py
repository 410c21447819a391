"""The parallel-norm family's kernel (Triton, interpreted on CPU) as a rewrite of tiny-gptneox's live layers: parity on
their recorded calls and the canary, the same tokens served after the swap and after it is reverted, and a kernel that
fails answered by the layer's own forward (the rewrite's norms run before its attention, so no KV cache entry is
appended twice) with the swap reverted."""

from __future__ import annotations

import tempfile
from pathlib import Path

from services.core.kernels import candidate_wrapper
from services.core.pb import events_pb2 as pb
from services.ops import parallel_norm
from services.ops.parallel_norm import template as dual_norm
from services.server.engine import Engine
from services.server.introspection import class_path, instances_of
from services.server.models import load_model
from services.server.parity import swap_with_parity
from services.server.shadow import check_swap

PROMPT = "Hello there"


def _entry(variant: str, source: str | None = None):
    config = dual_norm.search_configs(variant)[0]
    return candidate_wrapper(Path(tempfile.mkdtemp()), source or dual_norm.render(config), dual_norm.plan(config))


def _layer_contract(engine: Engine) -> tuple[pb.Contract, str]:
    layer = next(m for m in engine.model.modules() if parallel_norm.identify(m) is not None)
    return parallel_norm.contract_for(layer, class_path(layer)), parallel_norm.recognise(layer)


def _unpatched(engine: Engine, contract: pb.Contract) -> bool:
    return not any("forward" in m.__dict__ for m in instances_of(engine.model, contract.target))


async def test_a_committed_layer_swap_passes_parity_serves_the_same_tokens_and_reverts_exactly():
    engine = Engine(load_model("tiny-gptneox", "cpu"))
    try:
        await engine.capture_profile([PROMPT], 4)  # records the layers' cache-free calls for parity
        contract, variant = _layer_contract(engine)
        assert variant == "dual_layernorm" and contract.target.endswith("GPTNeoXLayer")
        ids = engine.encode(PROMPT)
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
        assert check_swap(handle) == "" and not failures
        await engine.exclusive(engine.revert, handle)
        assert _unpatched(engine, contract)
        assert engine.decode(ids, 8)[0] == before
    finally:
        engine.close()


async def test_a_kernel_that_fails_is_answered_by_the_layers_own_forward_and_the_swap_reverted():
    """The kernel cannot compile for the live width: the rewrite raises before the attention runs, so the server
    answers the call with the layer's own forward (its attention appends to the KV cache once) and reverts the swap;
    the tokens and logits are the eager model's."""
    engine = Engine(load_model("tiny-gptneox", "cpu"))
    try:
        contract, variant = _layer_contract(engine)
        ids = engine.encode(PROMPT)
        before, before_logits = engine.decode(ids, 6, keep_logits=True)
        source = dual_norm.render(dual_norm.search_configs(variant)[0]).replace(
            "    first_row = tl.program_id(0) * ROWS",
            "    tl.static_assert(N_COLS < 2)\n    first_row = tl.program_id(0) * ROWS",
        )
        handle = await engine.exclusive(engine.apply, contract, _entry(variant, source))
        failures: list[str] = []
        handle.on_failure = failures.append  # committed without parity, as a kernel that broke later would be
        after, after_logits = engine.decode(ids, 6, keep_logits=True)
        assert len(failures) == 1 and "AssertionError" in failures[0], failures
        assert handle.reverted and _unpatched(engine, contract)
        assert after == before
        assert all(float((a - b).abs().max()) < 1e-5 for a, b in zip(after_logits, before_logits, strict=True))
    finally:
        engine.close()


async def test_a_layer_serving_the_kernel_is_still_recognised_for_what_it_computes():
    """A later profile still names the swapped layer's op: recognition runs the class's own forward."""
    engine = Engine(load_model("tiny-gptneox", "cpu"))
    try:
        contract, variant = _layer_contract(engine)
        handle = await engine.exclusive(engine.apply, contract, _entry(variant))
        layer = instances_of(engine.model, contract.target)[0]
        assert "forward" in layer.__dict__ and parallel_norm.recognise(layer) == variant
        await engine.exclusive(engine.revert, handle)
    finally:
        engine.close()
