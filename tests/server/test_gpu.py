"""On a CUDA GPU: the same swap through the server's handler, on tiny-qwen2 (fp32) and on the
Qwen2.5-1.5B-shaped preset (bf16), with the profile, the decode speed before and after, and the parity
figures written to $OUT/server_gpu.json when OUT is set."""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

import pytest
import torch
from server_fixtures import HERE, QWEN_NORM, as_log, load_candidate, rmsnorm_contract, swap_run

from services.core import events as ev
from services.core.pb import events_pb2 as pb
from services.server import engine as engine_module
from services.server.batch_decode import PREFILL, PREFILL_GRAPH_LENGTHS
from services.server.engine import Engine
from services.server.hotswap import apply_swap, is_patched
from services.server.introspection import instances_of
from services.server.models import load_model
from services.server.service import ServerService

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def compiled_kernels(monkeypatch):
    """tests/conftest.py turns the Triton interpreter on for CPU CI; here kernels must compile for the GPU."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")


PROMPTS = ["Hello there", "The quick brown fox jumps over the lazy dog", "Once upon a time"]


async def _swap(engine: Engine, source: str, tmp_path: Path, run_id: str):
    service = ServerService(engine, tmp_path)
    log = as_log(swap_run(run_id, source, capabilities=("cuda-graph",)))  # the judge captured it (GPU judge)
    (outcome,) = await service.handle(log[-1], log)
    return service, log, outcome


async def _rollback(service: ServerService, log, swap_id: str) -> pb.SwapRolledBack:
    request = pb.RollbackRequested(swap_id=swap_id, reason="test done")
    trigger = ev.Recorded(99, ev.make_envelope("gpu", request, producer="test", time_ns=1, event_id="rb-gpu"))
    (rolled,) = await service.handle(trigger, [*log, trigger])
    return rolled


async def test_tiny_qwen2_swap_on_cuda_keeps_tokens(good_source, tmp_path):
    engine = Engine(load_model("tiny-qwen2", "cuda"))
    try:
        service, log, outcome = await _swap(engine, good_source, tmp_path, "gpu-tiny")
        assert isinstance(outcome, pb.SwapCommitted), outcome
        assert outcome.tokens_equal and outcome.observed.dtype == "float32"
        await _rollback(service, log, outcome.swap_id)
        assert not any(is_patched(m) for m in instances_of(engine.model, QWEN_NORM))
    finally:
        engine.close()


async def test_tiny_qwen2_batched_graph_lane_gives_each_request_the_eager_tokens():
    import asyncio

    engine = Engine(load_model("tiny-qwen2", "cuda"), slots=8)
    try:
        assert engine.graphs
        prompts = [PROMPTS[i % 3] + " " * i for i in range(11)]  # 11 requests for 8 slots
        expected = [engine.decode(engine.encode(p), 12 + i)[0] for i, p in enumerate(prompts)]

        async def one(i, p):
            chunks = [c async for c in engine.generate(engine.encode(p), 12 + i, stop_at_eos=False)]
            return [t for c in chunks for t in c]

        got = await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))
        assert got == expected
        assert engine.decoder.captures >= 2  # more than one bucket captured
    finally:
        engine.close()


async def _burst(engine: Engine, prompts: list[str], tokens: int) -> list[list[int]]:
    import asyncio

    async def one(prompt):
        chunks = [c async for c in engine.generate(engine.encode(prompt), tokens, stop_at_eos=False)]
        return [t for c in chunks for t in c]

    return await asyncio.gather(*(one(p) for p in prompts))


async def _settled(engine: Engine, seconds: float = 120.0) -> None:
    """Until the idle engine has captured every stale graph."""
    import asyncio

    for _ in range(int(seconds * 10)):
        if not engine.decoder.stale_keys():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"graphs still stale after {seconds} s: {engine.decoder.stale_keys()}")


async def test_no_graph_is_captured_on_the_request_path_after_a_start_a_swap_or_a_rollback(good_source, tmp_path):
    engine = Engine(load_model("tiny-qwen2", "cuda"), slots=8)
    try:
        decoder = engine.decoder
        keys = decoder.keys()
        steps = [k for k in keys if k[0] != PREFILL]
        assert len(steps) == 4 * len({span for _, span in steps}) and decoder.captures == len(keys)  # all at load
        assert len(keys) - len(steps) == 4 * len(PREFILL_GRAPH_LENGTHS)  # joins of 1-4 prompts up to 256 tokens
        assert decoder.stale_keys() == []
        prompts = [PROMPTS[i % 3] + " " * i for i in range(6)]
        expected = [engine.decode(engine.encode(p), 12)[0] for p in prompts]
        eager = decoder.eager_steps  # the load's own probe of the lane ran before any graph existed
        assert await _burst(engine, prompts, 12) == expected  # the first burst after the start
        assert decoder.captures == len(keys) and decoder.eager_steps == eager
        await _settled(engine)

        service, log, outcome = await _swap(engine, good_source, tmp_path, "gpu-fill")
        assert isinstance(outcome, pb.SwapCommitted) and outcome.observed.graphs_captured >= 1, outcome
        assert decoder.stale_keys()  # the others still hold the module's own forward: they serve meanwhile
        assert await _burst(engine, prompts, 12) == expected
        await _settled(engine)  # then captured with the kernel while idle
        assert decoder.eager_steps == eager

        captures = decoder.captures
        await _rollback(service, log, outcome.swap_id)
        # graphs holding the kernel are never replayed; each key's stock graph serves at once: no step runs eagerly,
        # and with no swap left serving nothing is stale, so nothing is captured again
        assert decoder.stale_keys() == [] and decoder.captures == captures
        assert await _burst(engine, prompts, 12) == expected
        assert decoder.eager_steps == eager and decoder.captures == captures
    finally:
        engine.close()


@pytest.mark.parametrize("model", ["tiny-qwen2", "tiny-jamba"])
def test_a_graph_captured_while_requests_run_leaves_every_stream_its_own_tokens(model):
    # A capture between steps (a swap's canary, or the batch loop's under load) re-runs the last step in its warm-up:
    # keys are rewritten as they were, and a stateful model's states are put back (else advanced twice more).
    engine = Engine(load_model(model, "cuda"), slots=8)
    try:
        decoder = engine.decoder
        prompts = [engine.encode(p) for p in PROMPTS]

        def streams(capture_at: int | None) -> list[list[int]]:
            with torch.inference_mode():
                tokens = [[int(decoder.prefill(slot, ids).argmax())] for slot, ids in enumerate(prompts)]
                for step in range(12):
                    if step == capture_at:
                        decoder._capture(decoder._next_key())
                    logits = decoder.step({slot: t[-1] for slot, t in enumerate(tokens)})
                    for slot, t in enumerate(tokens):
                        t.append(int(logits[slot].argmax()))
            for slot in range(len(prompts)):
                decoder.release(slot)
            return tokens

        captures = decoder.captures
        assert streams(None) == streams(5) and decoder.captures == captures + 1
    finally:
        engine.close()


async def test_under_traffic_that_never_idles_the_batch_loop_captures_the_swapped_kernel_into_its_graphs(
    good_source, tmp_path, monkeypatch
):
    monkeypatch.setattr(engine_module, "CAPTURE_UNDER_LOAD_S", 0.0)
    monkeypatch.setattr(engine_module, "FILL_PAUSE_S", 3600.0)  # the idle engine's filler never gets its turn
    monkeypatch.setattr(engine_module, "TICKS_PER_HOLD", 4)  # holds begin while the burst's slots are busy
    engine = Engine(load_model("tiny-qwen2", "cuda"), slots=8)
    try:
        decoder = engine.decoder
        prompts = [PROMPTS[i % 3] + " " * i for i in range(6)]
        expected = [engine.decode(engine.encode(p), 12)[0] for p in prompts]
        service, log, outcome = await _swap(engine, good_source, tmp_path, "gpu-load")
        assert isinstance(outcome, pb.SwapCommitted), outcome
        stale = len(decoder.stale_keys())
        assert await _burst(engine, prompts, 12) == expected  # 12 tokens: three holds of 4 ticks
        # the steps the burst ran met graphs of the old kernels; the batch loop captured the next one between holds
        assert len(decoder.stale_keys()) < stale
        captured = {p.name: p.count for p in engine.stats.parts.window()}
        assert captured["capture"] >= 1, captured
    finally:
        engine.close()


async def test_1p5b_shape_profile_swap_and_decode_speed(good_source, wrong_source, tmp_path):
    engine = Engine(load_model("qwen2.5-1.5b-shape", "cuda"))
    try:
        profile = await engine.capture_profile(PROMPTS, 16)
        assert profile.time_source == "cuda_events" and profile.hardware.calibrated
        norm = next(m for m in profile.modules if m.introspection.class_path == QWEN_NORM)
        root = next(m for m in profile.modules if m.introspection.class_path.endswith("Qwen2ForCausalLM"))
        assert norm.instances == 57 and norm.calls == 57 * 3 * 16 and norm.dtype == "bfloat16"
        assert list(norm.input_shape) == [1, 1, 1536]

        before = await engine.measure_decode(PROMPTS, 32, repeats=3)
        service, log, outcome = await _swap(engine, good_source, tmp_path, "gpu-1p5b")
        assert isinstance(outcome, pb.SwapCommitted), outcome.reason
        rolled = await _rollback(service, log, outcome.swap_id)
        # A/B interleaved in one process: the swapped and the eager model take turns, so drift on the host
        # (batch-1 decode is host-bound) lands on both sides; the ratio of medians is the figure.
        entry = load_candidate(HERE / "rmsnorm_kernel.py")
        swapped, eager = [], []
        for _ in range(3):
            handle = await engine.exclusive(apply_swap, engine.model, rmsnorm_contract(), entry)
            swapped.append((await engine.measure_decode(PROMPTS, 32, repeats=3)).tokens_per_s)
            await engine.exclusive(handle.revert)
            eager.append((await engine.measure_decode(PROMPTS, 32, repeats=3)).tokens_per_s)
        after, reverted = statistics.median(swapped), statistics.median(eager)
        _, _, wrong = await _swap(engine, wrong_source, tmp_path, "gpu-1p5b-wrong")
        assert isinstance(wrong, pb.SwapRejected) and "parity" in wrong.reason
        assert not any(is_patched(m) for m in instances_of(engine.model, QWEN_NORM))

        o = outcome.observed
        report = {
            "device_name": profile.hardware.device_name,
            "copy_GBps": profile.hardware.peak_bytes_per_s / 1e9,
            "matmul_TFLOPs": profile.hardware.peak_flops / 1e12,
            "rmsnorm_share_of_forward": norm.total_time_us / root.total_time_us,
            "rmsnorm_us_per_call": norm.total_time_us / norm.calls,
            "profile_decode_tokens_per_s": profile.decode_tokens_per_s,
            "tokens_per_s_before": before.tokens_per_s,
            "tokens_per_s_swapped_rounds": swapped,
            "tokens_per_s_eager_rounds": eager,
            "speedup_median_ab": after / reverted,
            "modules_patched": outcome.modules_patched,
            "activations": f"{o.activations_passed}/{o.activations_checked}",
            "max_abs_err": o.max_abs_err,
            "canary_logit_max_diff": o.canary_logit_max_diff,
            "canary_logit_tolerance": o.canary_logit_tolerance,
            "tokens_equal": outcome.tokens_equal,
            "served_lane": o.served_lane,
            "served_logit_max_diff": o.served_logit_max_diff,
            "graphs_captured_in_hold": o.graphs_captured,
            "hold_s": o.hold_s,
            "rolled_back_modules": rolled.observed.modules_matched,
            "wrong_kernel_max_abs_err": wrong.observed.max_abs_err,
            "wrong_kernel_canary_logit_max_diff": wrong.observed.canary_logit_max_diff,
            "wrong_kernel_reason": wrong.reason,
        }
        print(json.dumps(report, indent=2))
        if os.environ.get("OUT"):
            Path(os.environ["OUT"], "server_gpu.json").write_text(json.dumps(report, indent=2))
        assert outcome.modules_patched == 57 and rolled.observed.modules_matched == 57
        assert o.served_lane == "graphs" and o.graphs_captured >= 1
        assert o.served_logit_max_diff <= o.canary_logit_tolerance
        # Not asserted faster: one norm costs ~42 µs of host time patched vs ~88 µs eager (measured), ~10 %
        # of a decode step here, within the host's run-to-run noise. Asserted: no slowdown beyond it.
        assert after > 0.85 * reverted
    finally:
        engine.close()
