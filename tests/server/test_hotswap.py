"""Hot-swapping a real Triton RMSNorm (interpreted on CPU) into the live tiny models, and taking it out."""

from __future__ import annotations

import types

import pytest
import torch
from server_fixtures import HERE, LLAMA_NORM, QWEN_NORM, rmsnorm_contract

from services.core.kernels import load_entrypoint
from services.core.pb import events_pb2 as pb
from services.server.engine import Engine
from services.server.hotswap import SwapRefused, apply_swap, is_patched
from services.server.introspection import instances_of
from services.server.models import load_model
from services.server.parity import swap_with_parity


def _norms(engine, target=QWEN_NORM):
    return instances_of(engine.model, target)


def test_honest_kernel_keeps_greedy_tokens_and_revert_restores_the_exact_forward(engine, contract, kernel_path):
    entry = load_entrypoint(kernel_path, contract.entrypoint)
    ids = engine.encode("The quick brown fox")
    before, before_logits = engine.decode(ids, 8, keep_logits=True)
    handle = apply_swap(engine.model, contract, entry)
    try:
        assert len(handle.patched) == 5 and all(is_patched(m) for m in _norms(engine))
        x = torch.randn(3, 64)
        norm = _norms(engine)[0]
        eager = type(norm).forward(norm, x)
        assert torch.allclose(norm(x), eager, atol=1e-5)  # the kernel serves, through nn.Module.__call__
        after, after_logits = engine.decode(ids, 8, keep_logits=True)
        assert after == before
        assert max(float((a - b).abs().max()) for a, b in zip(after_logits, before_logits, strict=True)) < 1e-4
    finally:
        handle.revert()
    for m in _norms(engine):
        assert "forward" not in m.__dict__ and m.forward.__func__ is type(m).forward
    assert engine.decode(ids, 8)[0] == before


def test_revert_restores_an_instance_forward_that_was_already_there(engine, contract, kernel_path):
    entry = load_entrypoint(kernel_path, contract.entrypoint)
    norm = _norms(engine)[1]
    own = types.MethodType(type(norm).forward, norm)
    norm.__dict__["forward"] = own
    try:
        handle = apply_swap(engine.model, contract, entry)
        assert norm.__dict__["forward"] is not own
        handle.revert()
        assert norm.__dict__["forward"] is own  # exactly the object that was there
        assert all("forward" not in m.__dict__ for m in _norms(engine) if m is not norm)
    finally:
        norm.__dict__.pop("forward", None)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"target": "nowhere.NoSuchNorm"}, "no module of class nowhere.NoSuchNorm"),
        ({"kind": "function"}, "not served yet"),
        ({"target": ""}, "no target"),
    ],
)
def test_refusals_patch_nothing(engine, kernel_path, change, why):
    contract = rmsnorm_contract()
    for key, value in change.items():
        setattr(contract, key, value)
    entry = load_entrypoint(kernel_path, "rmsnorm_forward")
    with pytest.raises(SwapRefused, match=why):
        apply_swap(engine.model, contract, entry)
    assert not any(is_patched(m) for m in engine.model.modules())


def test_binding_to_a_missing_attribute_is_refused(engine, kernel_path):
    contract = rmsnorm_contract()
    contract.bindings[1].attr = "eps_that_does_not_exist"
    with pytest.raises(SwapRefused, match="eps_that_does_not_exist"):
        apply_swap(engine.model, contract, load_entrypoint(kernel_path, "rmsnorm_forward"))


def test_parity_passes_an_honest_kernel_on_live_activations(engine, contract, kernel_path):
    observed = pb.ParityObservation()
    handle = swap_with_parity(engine, contract, load_entrypoint(kernel_path, "rmsnorm_forward"), [72, 105], observed)
    try:
        assert handle is not None and observed.modules_matched == 5 and not observed.error
        assert observed.activations_checked == observed.activations_passed == 5 * 4
        assert observed.max_abs_err < observed.tolerance == pytest.approx(1e-4)
        assert list(observed.canary_tokens_before) == list(observed.canary_tokens_after)
        assert len(observed.canary_tokens_before) == 8
        assert observed.canary_logit_max_diff <= observed.canary_logit_tolerance
        assert observed.dtype == "float32"
    finally:
        handle.revert()


def test_parity_catches_a_kernel_that_forgets_the_weight(engine, contract, wrong_kernel_path):
    observed = pb.ParityObservation()
    handle = swap_with_parity(engine, contract, load_entrypoint(wrong_kernel_path, "rmsnorm_forward"), [72], observed)
    assert handle is not None  # patched: the caller decides, and reverts on reject
    handle.revert()
    assert observed.activations_passed == 0 < observed.activations_checked
    assert observed.max_abs_err > 1e-2 and observed.canary_logit_max_diff > observed.canary_logit_tolerance


def test_a_kernel_that_raises_on_live_inputs_is_reverted(engine, contract, tmp_path):
    path = tmp_path / "k_raises.py"
    path.write_text("def rmsnorm_forward(hidden_states, weight, eps):\n    raise RuntimeError('boom')\n")
    observed = pb.ParityObservation()
    handle = swap_with_parity(engine, contract, load_entrypoint(path, "rmsnorm_forward"), [72], observed)
    assert handle is None and "boom" in observed.error
    assert not any(is_patched(m) for m in engine.model.modules())


def test_the_swap_is_not_qwen_specific():
    engine = Engine(load_model("tiny-llama", "cpu"))
    try:
        observed = pb.ParityObservation()
        entry = load_entrypoint(HERE / "rmsnorm_kernel.py", "rmsnorm_forward")
        handle = swap_with_parity(engine, rmsnorm_contract(LLAMA_NORM), entry, [72, 105], observed)
        assert handle is not None and observed.modules_matched == 5
        assert observed.activations_passed == observed.activations_checked > 0
        handle.revert()
    finally:
        engine.close()
