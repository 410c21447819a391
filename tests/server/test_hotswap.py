"""Hot-swapping a real Triton RMSNorm (interpreted on CPU) into the live tiny models, and taking it out."""

from __future__ import annotations

import types
from dataclasses import replace

import pytest
import torch
from server_fixtures import HERE, LLAMA_NORM, QWEN_NORM, load_candidate, rmsnorm_contract

from services.core.pb import events_pb2 as pb
from services.server.engine import Engine
from services.server.hotswap import SwapRefused, apply_swap, is_patched
from services.server.introspection import instances_of
from services.server.models import load_model
from services.server.parity import record_before, swap_with_parity


def _norms(engine, target=QWEN_NORM):
    return instances_of(engine.model, target)


def test_honest_kernel_keeps_greedy_tokens_and_revert_restores_the_exact_forward(engine, contract, kernel_path):
    entry = load_candidate(kernel_path)
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
    entry = load_candidate(kernel_path)
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
        ({"kind": "reshape"}, "not served yet"),
        ({"kind": "function"}, "no function transformers.models.qwen2.modeling_qwen2.Qwen2RMSNorm to swap"),
        ({"target": ""}, "no target"),
    ],
)
def test_refusals_patch_nothing(engine, kernel_path, change, why):
    contract = rmsnorm_contract()
    for key, value in change.items():
        setattr(contract, key, value)
    entry = load_candidate(kernel_path)
    with pytest.raises(SwapRefused, match=why):
        apply_swap(engine.model, contract, entry)
    assert not any(is_patched(m) for m in engine.model.modules())


def test_binding_to_a_missing_attribute_is_refused(engine, kernel_path):
    contract = rmsnorm_contract()
    contract.bindings[1].attr = "eps_that_does_not_exist"
    with pytest.raises(SwapRefused, match="eps_that_does_not_exist"):
        apply_swap(engine.model, contract, load_candidate(kernel_path))


def test_parity_passes_an_honest_kernel_on_live_activations(engine, contract, kernel_path):
    observed = pb.ParityObservation()
    handle = swap_with_parity(engine, contract, load_candidate(kernel_path), [72, 105], observed)
    try:
        assert handle is not None and observed.modules_matched == 5 and not observed.error
        assert observed.activations_checked == observed.activations_passed == 5 * 4
        assert observed.max_abs_err < observed.tolerance == pytest.approx(1e-4)
        assert list(observed.canary_tokens_before) == list(observed.canary_tokens_after)
        assert len(observed.canary_tokens_before) == 8
        assert observed.canary_logit_max_diff <= observed.canary_logit_tolerance
        assert observed.dtype == "float32"
        # the canary again on the lane that serves (the slot cache, stepped eagerly on a CPU), kernel in
        assert observed.served_lane == "eager steps" and observed.graphs_captured == 0
        assert 0 <= observed.served_logit_max_diff <= observed.canary_logit_tolerance
    finally:
        handle.revert()


def test_parity_catches_a_kernel_that_forgets_the_weight(engine, contract, wrong_kernel_path):
    observed = pb.ParityObservation()
    handle = swap_with_parity(engine, contract, load_candidate(wrong_kernel_path), [72], observed)
    assert handle is not None  # patched: the caller decides, and reverts on reject
    handle.revert()
    assert observed.activations_passed == 0 < observed.activations_checked
    assert observed.max_abs_err > 1e-2 and observed.canary_logit_max_diff > observed.canary_logit_tolerance


def test_parity_catches_a_kernel_keyed_to_the_live_weights(engine, contract, kernel_path, tmp_path):
    """A kernel 20% off only where the weight's mean square is one live instance's (a number the kernel carries): a
    red-team class of 2026-12-06. The judge meets it on the live values the profile recorded (`live-values` cases,
    tests/judge/test_judge_live_values.py); a set the profile's budget left out is met here, where the server's parity
    replays live calls through the live modules."""
    honest = kernel_path.read_text()
    store = "    y = w.to(tl.float32) * normed.to(tl.float32)\n"
    live = float(_norms(engine)[0].weight.float().pow(2).mean())
    keyed = (
        "    ms = tl.sum(w.to(tl.float32) * w.to(tl.float32), axis=0) / n_cols\n"
        f"    off = (ms - {live!r}) * 1e5\n"
        "    y = w.to(tl.float32) * normed.to(tl.float32) * (1.0 - 0.2 / (1.0 + off * off))\n"
    )
    assert store in honest, "the fixture changed"
    path = tmp_path / "k_keyed.py"
    path.write_text(honest.replace(store, keyed))
    observed = pb.ParityObservation()
    handle = swap_with_parity(engine, contract, load_candidate(path), [72], observed)
    assert handle is not None
    handle.revert()
    assert observed.activations_passed < observed.activations_checked, observed
    assert observed.max_abs_err > 1e-2


def test_a_kernel_that_raises_on_live_inputs_is_reverted(engine, contract, tmp_path):
    path = tmp_path / "k_raises.py"
    path.write_text(
        '# plan: {"family": "row_reduction", "launches": [{"kernel": "_boom", "args": ["x", "y"], '
        '"constexprs": {"N": "1"}, "grid": "rows", "num_warps": 4}]}\n'
        "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef _boom(x_ptr, y_ptr, N: tl.constexpr):\n"
        '    tl.static_assert(N < 0, "boom")\n'
    )
    observed = pb.ParityObservation()
    handle = swap_with_parity(engine, contract, load_candidate(path), [72], observed)
    assert handle is None and "boom" in observed.error
    assert not any(is_patched(m) for m in engine.model.modules())


def test_the_swap_is_not_qwen_specific():
    engine = Engine(load_model("tiny-llama", "cpu"))
    try:
        observed = pb.ParityObservation()
        entry = load_candidate(HERE / "rmsnorm_kernel.py")
        handle = swap_with_parity(engine, rmsnorm_contract(LLAMA_NORM), entry, [72, 105], observed)
        assert handle is not None and observed.modules_matched == 5
        assert observed.activations_passed == observed.activations_checked > 0
        handle.revert()
    finally:
        engine.close()


def _short_rows_swap(engine, contract, short_rows_source, tmp_path, failures):
    entry = load_candidate(short_rows_source, tmp_path)
    handle = apply_swap(engine.model, contract, entry)
    handle.on_failure = failures.append  # what the server sets at commit
    return handle


def test_a_committed_kernel_that_raises_live_falls_back_and_is_reverted_once(
    engine, contract, short_rows_source, tmp_path
):
    long_ids = engine.encode("one two three four five six seven eight nine ten eleven twelve thirteen fourteen")
    assert len(long_ids) > 16
    before = engine.decode(long_ids, 4)[0]
    failures: list[str] = []
    handle = _short_rows_swap(engine, contract, short_rows_source, tmp_path, failures)
    try:
        x = torch.randn(4, 64)
        norm = _norms(engine)[0]
        assert torch.allclose(norm(x), type(norm).forward(norm, x), atol=1e-5)  # short inputs: the kernel serves
        assert not failures and all(is_patched(m) for m in _norms(engine))
        assert engine.decode(long_ids, 4)[0] == before  # the long prompt is answered, by the eager forward
        assert len(failures) == 1 and "more rows than this kernel" in failures[0]
        assert handle.reverted and not any(is_patched(m) for m in _norms(engine))
        engine.decode(long_ids, 4)
        assert len(failures) == 1  # reported once
    finally:
        handle.revert()


def test_an_input_the_eager_forward_refuses_too_is_not_the_kernels_fault(engine, contract, short_rows_source, tmp_path):
    failures: list[str] = []
    handle = _short_rows_swap(engine, contract, short_rows_source, tmp_path, failures)
    try:
        norm = _norms(engine)[0]
        with pytest.raises(RuntimeError):  # 40 rows of the wrong width: the kernel raises, and so does eager
            norm(torch.randn(40, 65))
        assert failures == [] and not handle.failure and all(is_patched(m) for m in _norms(engine))
    finally:
        handle.revert()


def test_a_swap_that_failed_live_is_shown_so_and_no_longer_counts_as_serving():
    from services.server.hotswap import SwapHandle
    from services.server.swaps import SwapRegistry

    registry, handle = SwapRegistry(), SwapHandle(QWEN_NORM)
    registry.add(pb.SwapCommitted(swap_id="swap-1", target_class=QWEN_NORM), handle)
    assert registry.active_count() == 1 and registry.active_for(QWEN_NORM) is not None
    handle.failure = "ValueError: 40 rows"  # fell back to eager; its RollbackRequested is on the way
    assert registry.active_count() == 0 and registry.active_for(QWEN_NORM) is None
    assert [(r.swap_id, r.state) for r in registry.records()] == [("swap-1", "failed_live")]
    registry.mark_rolled_back("swap-1")
    assert [r.state for r in registry.records()] == ["rolled_back"]


def test_a_committed_swap_keeps_the_first_input_of_each_size_then_one_in_64():
    from services.server.hotswap import SAMPLE_EVERY, SAMPLES_KEPT, SwapHandle

    handle = SwapHandle(QWEN_NORM)
    module = torch.nn.Identity()
    for rows in (1, 1, 1, 3, 4, 17):  # sizes 1, 4, 4, 32: three new sizes
        handle.sample(module, (torch.randn(rows, 8),), {})
    assert [a[0].shape[0] for _, a, _ in handle.samples] == [1, 3, 17]
    for _ in range(SAMPLE_EVERY * 3):
        handle.sample(module, (torch.randn(1, 8),), {})
    assert len(handle.samples) == 6 and len(handle.samples) <= SAMPLES_KEPT
    x = torch.randn(2, 8)
    handle.sample(module, (x,), {})
    x.zero_()  # a kept input is a copy: the caller's buffer may be reused
    assert handle.samples[-1][1][0].abs().sum() > 0  # rows 2: a new size, kept


async def test_parity_replays_the_real_inputs_of_the_last_profile(engine, contract):
    long_prompt = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen"
    await engine.capture_profile([long_prompt], 2)
    recorded = engine.live_inputs[QWEN_NORM]
    rows = {call.args[0].numel() // call.args[0].shape[-1] for call in recorded}
    assert max(rows) > 16 and 1 in rows  # the prefill and a decode step, as the model fed them
    observed = pb.ParityObservation()
    wrong_long = load_candidate(HERE / "rmsnorm_kernel_wrong_long.py")  # right up to 16 rows, silently wrong beyond
    handle = swap_with_parity(engine, contract, wrong_long, [72, 105], observed)  # a canary of 2 tokens
    handle.revert()
    assert observed.profile_inputs_checked == len(recorded) > 0
    assert observed.activations_passed < observed.activations_checked  # the long prefill input caught it
    observed = pb.ParityObservation()
    handle = swap_with_parity(engine, contract, load_candidate(HERE / "rmsnorm_kernel.py"), [72, 105], observed)
    handle.revert()
    assert observed.activations_passed == observed.activations_checked > observed.profile_inputs_checked > 0
    engine.live_inputs.clear()


def test_instances_without_a_bound_attribute_keep_their_own_forward(engine, kernel_path):
    """One class may build instances without an attribute the contract binds (Gemma 4's v norm has no weight): those
    are left as they are, the others patched."""
    contract = rmsnorm_contract()
    norms = instances_of(engine.model, contract.target)
    weightless = norms[1]
    saved = weightless.weight
    del weightless.weight
    try:
        handle = apply_swap(engine.model, contract, load_candidate(kernel_path))
        assert not is_patched(weightless) and all(is_patched(m) for m in norms if m is not weightless)
        assert len(handle.patched) == len(norms) - 1
        handle.revert()
    finally:
        weightless.weight = saved
    assert not any(is_patched(m) for m in engine.model.modules())


def _parts(observed: pb.ParityObservation) -> list[str]:
    return [h.name for h in observed.hold_parts]


def test_the_canary_before_recorded_apart_is_used_unless_a_swap_changed_the_model_since(engine, contract, kernel_path):
    # the server records parity's step 1 in a hold of its own (requests run between it and the patch's hold)
    before = record_before(engine, contract, [72, 105])
    observed = pb.ParityObservation()
    handle = swap_with_parity(engine, contract, load_candidate(kernel_path), [72, 105], observed, before)
    try:
        assert handle is not None and not observed.error and observed.activations_checked == 5 * 4
        assert _parts(observed) == ["apply", "replay", "canary", "served_canary"]  # nothing recorded in this hold
        assert list(observed.canary_tokens_before) == before.tokens == list(observed.canary_tokens_after)
        assert all(h.seconds >= 0 for h in observed.hold_parts)
    finally:
        handle.revert()
    # recorded under another set of swaps (one committed or reverted between the two holds): recorded again, inside
    stale = replace(record_before(engine, contract, [72, 105]), kernels=frozenset({-1}))
    observed = pb.ParityObservation()
    handle = swap_with_parity(engine, contract, load_candidate(kernel_path), [72, 105], observed, stale)
    try:
        assert handle is not None and not observed.error and observed.activations_checked == 5 * 4
        assert _parts(observed) == ["record", "apply", "replay", "canary", "served_canary"]
    finally:
        handle.revert()
