"""The server as the last line of the judge: after each commit, live calls of the swapped op are checked inline.

A real tiny Qwen2 (random weights) on the CPU and real Triton RMSNorm kernels run by the interpreter, bound through
the contract and binder the server serves with, committed after parity as the server commits them. Each kernel is
honest on the short canary parity runs and goes wrong only on a shape (or values) the canary never has.
"""

from __future__ import annotations

import json

import pytest
import torch
from candidate_files import plan_of

from services.core.kernels import bind, candidate_wrapper
from services.core.pb import events_pb2 as pb
from services.core.tolerances import within
from services.server import hotswap
from services.server.engine import Engine
from services.server.hotswap import SAMPLE_EVERY, is_patched
from services.server.introspection import instances_of
from services.server.models import load_model
from services.server.parity import swap_with_parity
from services.server.shadow import PREFIX, check_swap

QWEN_NORM = "transformers.models.qwen2.modeling_qwen2.Qwen2RMSNorm"
LONG = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen"

# One RMSNorm kernel; each test's kernel is it with one line of trouble (`{bug}`), keyed on the call's row count
# (a shape: the same for every input of that shape) or, for one, on the values.
PLAN = {
    "family": "row_reduction",
    "launches": [
        {
            "args": ["x", "w", "y", "rows", "x_row_stride", "y_row_stride", "cols", "eps"],
            "constexprs": {"BLOCK": "block_cols", "LIMIT": "16"},
            "grid": "rows",
            "kernel": "_rmsnorm",
            "num_warps": 4,
        }
    ],
}
KERNEL = (
    f"# plan: {json.dumps(PLAN)}\n"
    + """
import triton
import triton.language as tl


@triton.jit
def _rmsnorm(x_ptr, w_ptr, y_ptr, n_rows, stride_x, stride_y, n_cols, eps, BLOCK: tl.constexpr, LIMIT: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    normed = (x * (1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps))).to(x_ptr.dtype.element_ty)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    y = w.to(tl.float32) * normed.to(tl.float32)
    {bug}
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
"""
)
HONEST = "y = y"
# past LIMIT rows the weight is forgotten: the grid, the rows, everything else as the honest kernel
FORGETS_WEIGHT_PAST_16_ROWS = "y = tl.where(n_rows > LIMIT, normed.to(tl.float32), y)"
# past LIMIT rows the residual stream it normalises is doubled in place; its own output is right
DOUBLES_ITS_INPUT_PAST_16_ROWS = """if n_rows > LIMIT:
        tl.store(x_ptr + row * stride_x + cols, (2.0 * x).to(x_ptr.dtype.element_ty), mask=mask)"""
# past LIMIT rows it doubles the norm's weight in place
DOUBLES_ITS_WEIGHT_PAST_16_ROWS = """if n_rows > LIMIT:
        tl.store(w_ptr + cols, (2.0 * w.to(tl.float32)).to(w_ptr.dtype.element_ty), mask=mask)"""
# a row holding a value past 100 loses the weight: wrong on values, at any shape
FORGETS_WEIGHT_ON_LARGE_VALUES = "y = tl.where(tl.max(tl.abs(x), axis=0) > 100.0, normed.to(tl.float32), y)"


def _contract() -> pb.Contract:
    return pb.Contract(
        kind="module_class",
        target=QWEN_NORM,
        entrypoint="rmsnorm",
        inputs=["hidden_states"],
        bindings=[
            pb.Binding(param="weight", attr="weight", kind="tensor"),
            pb.Binding(param="eps", attr="variance_epsilon", kind="float"),
        ],
    )


def _entry(bug: str, tmp_path):
    source = KERNEL.replace("{bug}", bug)
    return candidate_wrapper(tmp_path / f"kernels-{abs(hash(bug))}", source, plan_of(source))


@pytest.fixture(scope="module")
def engine():
    e = Engine(load_model("tiny-qwen2", "cpu"))
    yield e
    e.close()


def _norms(engine) -> list[torch.nn.Module]:
    return instances_of(engine.model, QWEN_NORM)


def _committed(engine, bug: str, tmp_path, failures: list[str], shadow_calls: int | None = None):
    """Parity on the live model with a short canary (which the kernel passes), then the commit as the server makes
    it (ServerService._swap: the reporter that records a RollbackRequested, and the window)."""
    observed = pb.ParityObservation()
    entry = _entry(bug, tmp_path)
    handle = swap_with_parity(engine, _contract(), entry, engine.encode("Hi"), observed)
    assert handle is not None, observed.error
    assert observed.activations_passed == observed.activations_checked > 0
    handle.commit(failures.append, shadow_calls)
    return handle, bind(_contract(), entry)


def test_a_kernel_wrong_past_16_rows_is_caught_on_its_first_long_call_and_the_caller_gets_the_modules_answer(
    engine, tmp_path
):
    long_ids = engine.encode(LONG)
    assert len(long_ids) > 16
    before, before_logits = engine.decode(long_ids, 3, keep_logits=True)
    failures: list[str] = []
    handle, _ = _committed(engine, FORGETS_WEIGHT_PAST_16_ROWS, tmp_path, failures)
    try:
        after, after_logits = engine.decode(long_ids, 3, keep_logits=True)  # the prefill: rows > 16
        # the very first long call was answered by the module's own forward, and everything after it ran eagerly
        assert after == before
        assert all(torch.equal(a, b) for a, b in zip(after_logits, before_logits, strict=True))
        assert handle.reverted and not any(is_patched(m) for m in _norms(engine))
        assert handle.inline_checks == 1 and len(failures) == 1
        assert failures[0].startswith(f"{PREFIX} on a live call of {QWEN_NORM} (inputs [(1, {len(long_ids)}, 64)])")
        assert "max abs err" in failures[0] and handle.failure == failures[0]
    finally:
        handle.revert()

    # the same on one call: the kernel's answer is wrong, the caller gets the module's own, bit for bit
    handle, kernel = _committed(engine, FORGETS_WEIGHT_PAST_16_ROWS, tmp_path, failures)
    try:
        norm, x = _norms(engine)[0], torch.randn(1, 20, 64)
        reference = type(norm).forward(norm, x)
        assert not within(kernel(norm, (x,), {}), reference)[0]
        assert torch.equal(norm(x), reference)
        assert handle.reverted and len(failures) == 2
    finally:
        handle.revert()


def test_a_kernel_that_writes_into_its_input_is_caught_on_the_first_live_call_and_the_input_put_back(engine, tmp_path):
    long_ids = engine.encode(LONG)
    before, before_logits = engine.decode(long_ids, 3, keep_logits=True)
    failures: list[str] = []
    handle, _ = _committed(engine, DOUBLES_ITS_INPUT_PAST_16_ROWS, tmp_path, failures)
    try:
        # the first norm's input is the residual stream its layer adds back: doubled, every later logit would move
        after, after_logits = engine.decode(long_ids, 3, keep_logits=True)
        assert after == before
        assert all(torch.equal(a, b) for a, b in zip(after_logits, before_logits, strict=True))
        assert handle.reverted and handle.inline_checks == 1
        assert failures == [handle.failure] and failures[0].endswith("the kernel wrote its input hidden_states")
    finally:
        handle.revert()

    handle, kernel = _committed(engine, DOUBLES_ITS_INPUT_PAST_16_ROWS, tmp_path, failures)
    try:
        norm, x = _norms(engine)[0], torch.randn(1, 20, 64)
        x0 = x.clone()
        served = norm(x)
        assert torch.equal(x, x0)  # the caller's tensor holds what it held
        assert torch.equal(served, type(norm).forward(norm, x0))
        assert handle.reverted and "wrote its input hidden_states" in failures[-1]
    finally:
        handle.revert()


def test_a_kernel_that_writes_into_its_weight_is_caught_and_the_weight_put_back(engine, tmp_path):
    failures: list[str] = []
    handle, _ = _committed(engine, DOUBLES_ITS_WEIGHT_PAST_16_ROWS, tmp_path, failures)
    try:
        norm, x = _norms(engine)[0], torch.randn(1, 20, 64)
        weight = norm.weight.detach().clone()
        served = norm(x)
        assert torch.equal(norm.weight, weight)
        assert torch.equal(served, type(norm).forward(norm, x))  # the module's answer, with its own weight
        assert handle.reverted and failures[-1].endswith("the kernel wrote into module state weight (put back)")
    finally:
        handle.revert()


def test_an_honest_kernel_serves_through_the_whole_window_and_its_outputs_are_served(engine, tmp_path):
    ids = engine.encode("Hello there")
    before = engine.decode(ids, 8)[0]
    failures: list[str] = []
    handle, kernel = _committed(engine, HONEST, tmp_path, failures, shadow_calls=30)
    try:
        assert engine.decode(ids, 8)[0] == before
        per_forward = len(_norms(engine))
        assert handle.eager_calls == 8 * per_forward > 30
        assert handle.inline_checks == 30  # the window; the prefill's and the steps' sizes were met inside it
        assert not failures and not handle.reverted and all(is_patched(m) for m in _norms(engine))
    finally:
        handle.revert()

    handle, kernel = _committed(engine, HONEST, tmp_path, failures)
    try:
        norm = _norms(engine)[1]
        for shape in ((1, 1, 64), (1, 7, 64), (3, 20, 64), (1, 300, 64)):
            x = torch.randn(shape)
            assert torch.equal(norm(x), kernel(norm, (x.clone(),), {}))  # the kernel's own answer, checked
        assert handle.inline_checks == 4 and not failures and not handle.reverted
    finally:
        handle.revert()


def test_after_the_window_only_new_sizes_are_checked_inline_and_samples_kept(engine, tmp_path):
    failures: list[str] = []
    handle, _ = _committed(engine, HONEST, tmp_path, failures, shadow_calls=5)
    try:
        norm = _norms(engine)[0]
        for _ in range(5):  # the window
            norm(torch.randn(1, 3, 64))
        assert handle.inline_checks == 5 and len(handle.samples) == 1  # rows 3: a new size, kept
        for _ in range(200):
            norm(torch.randn(1, 3, 64))
        assert handle.calls == 205 and handle.inline_checks == 5  # past the window: no inline check of a seen size
        assert len(handle.samples) == 1 + 205 // SAMPLE_EVERY  # one in SAMPLE_EVERY kept
        norm(torch.randn(1, 20, 64))  # rows 20: a size never served, always checked
        assert handle.inline_checks == 6 and len(handle.samples) == 2 + 205 // SAMPLE_EVERY
        assert check_swap(handle) == "" and not handle.samples  # the periodic pass replays what was kept
        assert not failures and all(is_patched(m) for m in _norms(engine))
    finally:
        handle.revert()


def test_past_the_window_the_periodic_pass_still_finds_a_kernel_wrong_on_a_kept_sample(engine, tmp_path):
    """Wrong on values only, at a size already served: no inline check meets it past the window; the kept sample,
    copied before the kernel ran, is replayed by the periodic pass."""
    failures: list[str] = []
    handle, _ = _committed(engine, FORGETS_WEIGHT_ON_LARGE_VALUES, tmp_path, failures, shadow_calls=0)
    try:
        norm = _norms(engine)[0]
        norm(torch.randn(1, 3, 64))  # a new size: checked inline, right
        check_swap(handle)
        while handle.calls < SAMPLE_EVERY - 1:
            norm(torch.randn(1, 3, 64))
        norm(torch.randn(1, 3, 64) * 1000)  # the call kept (one in SAMPLE_EVERY): served wrong, silently
        assert handle.inline_checks == 1 and not failures and len(handle.samples) == 1
        problem = check_swap(handle)
        assert problem.startswith(f"{PREFIX} on 1 of 1 live inputs")
        assert not failures  # shadow_pass reports it (handle.drifted)
    finally:
        handle.revert()


def test_kept_samples_are_bounded_in_bytes(engine, tmp_path, monkeypatch):
    failures: list[str] = []
    handle, _ = _committed(engine, HONEST, tmp_path, failures, shadow_calls=0)
    row_bytes = 64 * 4
    monkeypatch.setattr(hotswap, "SAMPLE_BYTES", 30 * row_bytes)
    try:
        norm = _norms(engine)[0]
        norm(torch.randn(1, 50, 64))  # a new size, checked inline; larger than the bound: not kept
        assert handle.inline_checks == 1 and not handle.samples
        for rows in (3, 5, 9, 17):  # new sizes 4, 8, 16, 32: each kept, the oldest dropped past the bound
            norm(torch.randn(1, rows, 64))
        kept = [a[0].shape[1] for _, a, _ in handle.samples]
        assert kept == [9, 17] and sum(kept) * row_bytes <= hotswap.SAMPLE_BYTES
    finally:
        handle.revert()


@pytest.mark.parametrize("value", ["abc", "-1", "2.5"])
def test_a_bad_shadow_calls_setting_is_one_line_naming_it(monkeypatch, value):
    from pydantic import ValidationError

    from services.core.settings import Settings, settings_problem

    monkeypatch.setenv("YANTRA_SHADOW_CALLS", value)
    with pytest.raises(ValidationError) as caught:
        Settings.from_env()
    problem = settings_problem(caught.value)
    assert problem.startswith(f"YANTRA_SHADOW_CALLS={value}: ") and "\n" not in problem


def test_the_shadow_calls_setting_reaches_the_server(engine, monkeypatch, tmp_path):
    from services.core.settings import Settings
    from services.server.service import ServerService

    monkeypatch.setenv("YANTRA_SHADOW_CALLS", "")
    assert Settings.from_env().shadow_calls == hotswap.SHADOW_CALLS == 256
    monkeypatch.setenv("YANTRA_SHADOW_CALLS", "0")
    assert Settings.from_env().shadow_calls == 0
    monkeypatch.setenv("YANTRA_SHADOW_CALLS", "12")
    assert Settings.from_env().env()["YANTRA_SHADOW_CALLS"] == "12"
    assert ServerService(engine, tmp_path).shadow_calls == 12
    assert ServerService(engine, tmp_path, shadow_calls=3).shadow_calls == 3


@pytest.mark.gpu
def test_on_a_gpu_a_decode_bucket_first_met_after_the_commit_is_checked_in_its_graphs_eager_warm_up(tmp_path):
    """Graph replays are never watched; the eager warm-up steps before each capture are, on the graph's own shape.
    Twenty requests stepped together run 32 rows, a size no prefill of one row has met. After the commit the graph
    captured at load (the module's own forward) serves that step until the idle engine captures it again with the
    kernel: the warm-up's first call finds the kernel wrong, the swap is reverted before the capture, and the
    step's logits stay the eager model's."""
    engine = Engine(load_model("tiny-qwen2", "cuda"), slots=32)
    try:
        decoder = engine.decoder
        assert decoder is not None and decoder.graphs

        def twenty_together() -> torch.Tensor:
            slots = list(range(20))
            for slot in slots:
                decoder.prefill(slot, [3 + slot])  # one row each: a size the canary has too
            try:
                return decoder.step(dict.fromkeys(slots, 7))[:20].float().cpu()
            finally:
                for slot in slots:
                    decoder.release(slot)

        before = twenty_together()
        failures: list[str] = []
        handle, _ = _committed(engine, FORGETS_WEIGHT_PAST_16_ROWS, tmp_path, failures)
        close = 1e-4 * max(1.0, float(before.abs().max()))
        assert float((twenty_together() - before).abs().max()) <= close  # the graph from before the commit
        assert not handle.reverted and (32, 128) in decoder.stale_keys()
        captures = decoder.captures
        decoder.capture_stale(len(decoder.keys()))  # what the idle engine does (Engine._fill_graphs)
        assert handle.reverted and len(failures) == 1, failures
        assert "(inputs [(32, 1, 64)])" in failures[0] and "max abs err" in failures[0]
        assert decoder.captures > captures
        assert float((twenty_together() - before).abs().max()) <= close  # captured again, without the kernel
    finally:
        engine.close()
