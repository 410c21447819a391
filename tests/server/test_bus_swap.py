"""The server on a real nats-server: a judged Triton RMSNorm is swapped into the live model, a wrong one is
rejected and reverted, a rollback restores the eager forward, and replay re-derives every answer byte for byte."""

from __future__ import annotations

import asyncio
import time

import pytest
import torch
from runlog import has, wait_for_log
from server_fixtures import HERE, QWEN_NORM, load_candidate, swap_run

from services.core import events as ev
from services.core.bus import Bus
from services.core.kernels import bind
from services.core.pb import events_pb2 as pb
from services.core.replay import verify
from services.core.runner import answer
from services.server.domain import REDERIVE
from services.server.hotswap import is_patched
from services.server.introspection import instances_of
from services.server.service import ServerService, request_rollbacks, shadow_loop
from services.server.vocab_sweep import sweep


@pytest.fixture
async def serving(nats_server, engine, run_id, tmp_path):
    """The server's handler behind a durable consumer of this run's subjects, as run_service wires it."""
    service = ServerService(engine, tmp_path)
    assert service.static_check is not None, "the shared candidate check should be wired in"
    # A connection of its own, closed without drain: the core consumer leaves its pull subscription
    # open when stopped, and draining that would wait out the 30 s drain timeout.
    consumer_bus = await Bus.connect(nats_server.url, name=f"server-{run_id}")
    stop = asyncio.Event()

    async def on_message(rec):
        await answer(consumer_bus, service, rec)

    subjects = [ev.run_filter(run_id, t) for t in service.consumes]
    task = asyncio.create_task(consumer_bus.consume(f"server-{run_id}", subjects, on_message, stop, ack_wait=10))
    reporter = asyncio.create_task(request_rollbacks(consumer_bus, service, stop))
    yield service
    stop.set()
    await asyncio.gather(task, reporter)
    await consumer_bus.nc.close()


async def _publish(bus, envelopes):
    for env in envelopes:
        await bus.publish(env)


def _mine(mismatches):
    return [str(m) for m in mismatches if m.type in REDERIVE]


async def test_judged_kernel_is_committed_then_rolled_back_and_replays_exactly(
    bus, run_id, engine, serving, good_source
):
    ids = engine.encode("Hello there")
    before, _ = await engine.exclusive(engine.decode, ids, 8)
    await _publish(bus, swap_run(run_id, good_source))
    log = await wait_for_log(bus, run_id, has("SwapCommitted"))

    committed = ev.last(log, "SwapCommitted")
    msg = committed.msg
    concluded = ev.last(log, "TargetConcluded")
    assert committed.env.causation_id == concluded.env.event_id and committed.env.producer == "server"
    assert (
        msg.swap_id == f"swap-{concluded.env.run_id}-{concluded.msg.candidate_id}"
        and msg.modules_patched == 5
        and msg.tokens_equal
    )
    assert msg.observed.judged_ok and msg.observed.static_ok and msg.observed.dtype == "float32"
    assert msg.observed.activations_passed == msg.observed.activations_checked > 0
    assert all(is_patched(m) for m in instances_of(engine.model, QWEN_NORM))
    assert (await engine.exclusive(engine.decode, ids, 8))[0] == before
    assert [(r.swap_id, r.state) for r in serving.swaps.records()] == [(msg.swap_id, "committed")]
    assert engine.module_state(QWEN_NORM)[2] == 5
    assert await answer(bus, serving, concluded) == 0  # answered once, never twice

    rollback = pb.RollbackRequested(swap_id=msg.swap_id, reason="operator asked")
    env = ev.make_envelope(run_id, rollback, producer="test", time_ns=time.time_ns(), event_id=f"rb-{run_id}")
    await bus.publish(env)
    log = await wait_for_log(bus, run_id, has("SwapRolledBack"))
    rolled = ev.last(log, "SwapRolledBack").msg
    assert rolled.candidate_id == msg.candidate_id and rolled.observed.modules_matched == 5
    assert "operator asked" in rolled.reason
    assert not any(is_patched(m) for m in instances_of(engine.model, QWEN_NORM))
    assert [(r.swap_id, r.state) for r in serving.swaps.records()] == [(msg.swap_id, "rolled_back")]

    assert [r.type for r in log][-3:] == ["SwapCommitted", "RollbackRequested", "SwapRolledBack"]
    assert _mine(verify(log, REDERIVE)) == []


async def test_a_kernel_that_raises_while_serving_is_rolled_back_through_the_log_and_no_request_fails(
    bus, run_id, engine, serving, short_rows_source
):
    serving.vocab_sweep = False  # its calls of up to 128 rows would meet the bug before the patch: the layer after
    long_ids = engine.encode("one two three four five six seven eight nine ten eleven twelve thirteen fourteen")
    before, _ = await engine.exclusive(engine.decode, long_ids, 4)
    await _publish(bus, swap_run(run_id, short_rows_source))
    log = await wait_for_log(bus, run_id, has("SwapCommitted"))  # parity's canary is short: the bug is not met
    committed = ev.last(log, "SwapCommitted")

    assert (await engine.exclusive(engine.decode, long_ids, 4))[0] == before  # answered, by the eager forward
    log = await wait_for_log(bus, run_id, has("SwapRolledBack"))
    asked, rolled = ev.last(log, "RollbackRequested"), ev.last(log, "SwapRolledBack")
    assert asked.env.producer == "server" and asked.env.causation_id == committed.env.event_id
    assert asked.msg.swap_id == committed.msg.swap_id
    assert asked.msg.reason.startswith("the kernel raised while serving: ") and "more rows than" in asked.msg.reason
    assert "more rows than this kernel" in asked.msg.failure
    assert rolled.env.causation_id == asked.env.event_id and rolled.msg.observed.modules_matched == 5
    assert rolled.msg.reason.startswith("rolled back 5 modules: the kernel raised while serving")
    assert not any(is_patched(m) for m in instances_of(engine.model, QWEN_NORM))
    assert [(r.swap_id, r.state) for r in serving.swaps.records()][-1] == (committed.msg.swap_id, "rolled_back")
    assert _mine(verify(log, REDERIVE)) == []


async def test_kernel_that_forgets_the_weight_is_rejected_and_reverted(bus, run_id, engine, serving, wrong_source):
    await _publish(bus, swap_run(run_id, wrong_source))
    log = await wait_for_log(bus, run_id, has("SwapRejected"))
    rejected = ev.last(log, "SwapRejected").msg
    # the vocabulary sweep met it before the patch: every call wrong, every token of the 512 named among the first
    observed = rejected.observed
    assert observed.sweep_tokens == 512 and observed.sweep_calls_passed == 0 < observed.sweep_calls_checked
    assert len(observed.sweep_wrong_tokens) == 8 and all(0 <= t < 512 for t in observed.sweep_wrong_tokens)
    # each token at a position drawn over the served range: a rotary model's lone tokens do not depend on it
    top = observed.sweep_max_position
    assert 0 < top < engine.loaded.max_positions
    recurring = f", then a prompt of {observed.sweep_recurring_tokens} recurring"
    assert observed.sweep_recurring_tokens == 512  # after the vocabulary, a prompt whose tokens recur, the longest
    assert rejected.reason.startswith(
        f"vocabulary sweep at positions 0-{top}{recurring}: 0/{observed.sweep_calls_checked} calls"
    )
    assert observed.modules_matched == 0 and observed.hold_s == 0  # never patched
    assert not any(is_patched(m) for m in instances_of(engine.model, QWEN_NORM))
    assert serving.swaps.active_count() == 0
    assert _mine(verify(log, REDERIVE)) == []


async def test_unjudged_candidate_is_rejected_without_importing_it(bus, run_id, serving, good_source):
    await _publish(bus, swap_run(run_id, good_source, reward=1, run_min_reward=2))
    log = await wait_for_log(bus, run_id, has("SwapRejected"))
    rejected = ev.last(log, "SwapRejected").msg
    assert "reward >= 2" in rejected.reason and not rejected.observed.judged_ok
    assert not (serving.kernel_dir).exists()  # the source was never written, let alone imported
    assert _mine(verify(log, REDERIVE)) == []


async def test_a_judged_candidate_with_host_code_is_refused_by_the_server_itself(
    bus, run_id, serving, good_source, tmp_path
):
    # Suppose the judge were fooled: the server re-runs the candidate check and imports nothing that fails it.
    marker = tmp_path / "imported"
    host = good_source + f"\n\nopen({str(marker)!r}, 'w')\n"
    await _publish(bus, swap_run(run_id, host))
    log = await wait_for_log(bus, run_id, has("SwapRejected"))
    rejected = ev.last(log, "SwapRejected").msg
    assert not rejected.observed.static_ok and not marker.exists()
    assert not (serving.kernel_dir).exists()
    assert _mine(verify(log, REDERIVE)) == []


async def test_conclusion_without_swap_gets_no_answer(bus, run_id, serving, good_source):
    envelopes = swap_run(run_id, good_source, swap=False)
    await _publish(bus, envelopes)
    log = await bus.read_run(run_id)
    trigger = next(r for r in log if r.env.event_id == envelopes[-1].event_id)
    assert await answer(bus, serving, trigger) == 0
    assert [r.type for r in await bus.read_run(run_id)] == [e.type for e in envelopes]


async def test_rollback_of_an_unknown_swap_says_nothing_was_rolled_back(bus, run_id, serving):
    request = pb.RollbackRequested(swap_id="swap-nope", reason="just in case")
    await bus.publish(ev.make_envelope(run_id, request, producer="test", time_ns=1, event_id=f"rb-{run_id}"))
    log = await wait_for_log(bus, run_id, has("SwapRolledBack"))
    rolled = ev.last(log, "SwapRolledBack").msg
    assert rolled.reason.startswith("nothing rolled back (just in case)") and "unknown" in rolled.reason
    assert _mine(verify(log, REDERIVE)) == []


async def test_a_kernel_silently_wrong_on_long_inputs_is_found_by_the_shadow_check_and_rolled_back(
    bus, run_id, engine, serving
):
    serving.vocab_sweep = False  # its calls of up to 128 rows would meet the bug before the patch: the layer after
    long_ids = engine.encode("one two three four five six seven eight nine ten eleven twelve thirteen fourteen")
    assert len(long_ids) > 16
    before, _ = await engine.exclusive(engine.decode, long_ids, 4)
    source = (HERE / "rmsnorm_kernel_wrong_long.py").read_text()
    await _publish(bus, swap_run(run_id, source))
    log = await wait_for_log(bus, run_id, has("SwapCommitted"))  # parity's canary is short: the wrong launch is not met
    committed = ev.last(log, "SwapCommitted")
    assert committed.msg.observed.hold_s > 0
    # parity's canary before the patch ran in a hold of its own, first; nothing was recorded again in the patch's
    parts = [h.name for h in committed.msg.observed.hold_parts]
    assert parts == ["record_apart", "apply", "replay", "canary", "served_canary"]
    assert await serving.shadow_check() == []  # the canary's own short inputs: right
    [entry] = [e for e in serving.swaps.serving_entries() if e.swap_id == committed.msg.swap_id]
    assert entry.handle.shadow_calls == serving.shadow_calls  # the window the commit opened

    # real traffic: the prefill meets the wrong launch; the check on that very call answers it with the module's
    # own forward (the request gets the eager model's tokens) and takes the kernel out at once
    assert (await engine.exclusive(engine.decode, long_ids, 4))[0] == before
    assert not any(is_patched(m) for m in instances_of(engine.model, QWEN_NORM))
    assert entry.handle.failure.startswith("the shadow check found the kernel off the module's own forward on ")
    assert await serving.shadow_check() == []  # nothing serving is left to check

    log = await wait_for_log(bus, run_id, has("SwapRolledBack"))
    asked, rolled = ev.last(log, "RollbackRequested"), ev.last(log, "SwapRolledBack")
    assert asked.env.producer == "server" and asked.env.causation_id == committed.env.event_id
    assert asked.msg.reason.startswith("the shadow check found the kernel off the module's own forward on ")
    assert rolled.env.causation_id == asked.env.event_id
    assert [(r.swap_id, r.state) for r in serving.swaps.records()][-1] == (committed.msg.swap_id, "rolled_back")
    assert _mine(verify(log, REDERIVE)) == []


async def test_a_kept_input_the_check_cannot_replay_is_skipped_and_the_shadow_loop_keeps_running(
    bus, run_id, engine, serving, good_source
):
    """One bad sample must not take the server down (a task failure ends it): a kept input the module's own
    forward refuses says nothing about the kernel — skipped, the swap keeps serving, the loop goes on."""
    await _publish(bus, swap_run(run_id, good_source))
    committed = ev.last(await wait_for_log(bus, run_id, has("SwapCommitted")), "SwapCommitted")
    [entry] = [e for e in serving.swaps.serving_entries() if e.swap_id == committed.msg.swap_id]
    module = next(iter(instances_of(engine.model, QWEN_NORM)))
    width = module.weight.shape[0]
    entry.handle.samples.append((module, (torch.randn(3, width + 1),), {}))  # no norm of this width can run it
    assert await serving.shadow_check() == []
    assert not entry.handle.samples and all(is_patched(m) for m in instances_of(engine.model, QWEN_NORM))

    stop = asyncio.Event()
    entry.handle.samples.append((module, (torch.randn(3, width + 1),), {}))
    loop = asyncio.create_task(shadow_loop(serving, stop, every_s=0.05))
    await asyncio.sleep(0.3)  # several passes
    assert not loop.done() and not entry.handle.samples
    stop.set()
    await asyncio.wait_for(loop, 5)
    await serving.shadow_check()
    assert [(r.swap_id, r.state) for r in serving.swaps.records()][-1] == (committed.msg.swap_id, "committed")
    engine.revert(entry.handle)  # the next test of this file's engine starts from the model's own forward


def _keyed_source(engine, token: int) -> str:
    """The honest kernel, except that a row whose Σx² is `token`'s embedding row's comes out scaled by 0.8 (layer 0's
    input norm meets that row wherever the token stands): arithmetic on its loads through a bump as narrow as a
    millionth of the sum, no branch, as red-team kernels keyed to the served model's own activations were written."""
    row = engine.model.get_input_embeddings().weight[token].detach().float()
    total = float((row * row).sum())
    honest = (HERE / "rmsnorm_kernel.py").read_text()
    old = "    normed = (x * (1.0 / tl.sqrt(variance + eps))).to(x_ptr.dtype.element_ty)\n"
    near = f"(tl.sum(x * x, axis=0) - {total!r}) / {total * 1e-6!r}"
    new = f"    near = {near}\n    keep = 1.0 - 0.2 * tl.exp(-near * near)\n" + old.replace("1.0 /", "keep /")
    assert old in honest
    return honest.replace(old, new)


QUESTION = ord("?")  # a byte token of the tiny model's vocabulary that no canary or prompt here holds


async def test_a_kernel_keyed_to_one_tokens_embedding_row_is_refused_by_the_vocabulary_sweep(
    bus, run_id, engine, serving
):
    await _publish(bus, swap_run(run_id, _keyed_source(engine, QUESTION)))
    log = await wait_for_log(bus, run_id, has("SwapRejected"))
    rejected = ev.last(log, "SwapRejected").msg
    observed = rejected.observed
    assert list(observed.sweep_wrong_tokens) == [QUESTION]  # its row, in layer 0's norm alone
    # one call of the vocabulary wrong, and the recurring prompt's calls where its drawn tokens hold it
    assert observed.sweep_calls_passed < observed.sweep_calls_checked and observed.sweep_tokens == 512
    assert f"wrong on token {QUESTION}" in rejected.reason and observed.modules_matched == 0
    assert not any(is_patched(m) for m in instances_of(engine.model, QWEN_NORM))
    assert _mine(verify(log, REDERIVE)) == []


async def test_without_the_sweep_the_keyed_kernel_passes_parity_and_only_a_request_holding_the_token_finds_it(
    bus, run_id, engine, serving
):
    serving.vocab_sweep = False
    ids = engine.encode("Why?")
    before, _ = await engine.exclusive(engine.decode, ids, 4)
    await _publish(bus, swap_run(run_id, _keyed_source(engine, QUESTION)))
    log = await wait_for_log(bus, run_id, has("SwapCommitted"))  # the canary and the recorded calls never hold it
    assert ev.last(log, "SwapCommitted").msg.observed.sweep_tokens == 0
    # the request that holds it is answered by the module's own forward (the inline shadow check), then rolled back
    assert (await engine.exclusive(engine.decode, ids, 4))[0] == before
    log = await wait_for_log(bus, run_id, has("SwapRolledBack"))
    assert "the shadow check found the kernel off the module's own forward" in ev.last(log, "SwapRolledBack").msg.reason


async def test_where_a_kernel_serves_the_target_now_the_sweep_holds_the_candidate_to_the_modules_own_forward(
    engine, contract, good_source, tmp_path
):
    serving_now = await engine.exclusive(engine.apply, contract, load_candidate(good_source, tmp_path / "now"))
    try:
        observed = pb.ParityObservation()
        keyed = load_candidate(_keyed_source(engine, QUESTION), tmp_path / "keyed")
        await sweep(engine, contract, bind(contract, keyed), 0, observed)
    finally:
        engine.revert(serving_now)
    assert list(observed.sweep_wrong_tokens) == [QUESTION] and observed.sweep_calls_checked > 0
