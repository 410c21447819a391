"""The child's side of correctness, as units: the per-call clock, outputs pre-filled with another case's answer, and
inputs checked bit for bit after calls that are no case (services.judge.run_cases).

A kernel that trusts its output cannot pass the candidate check (`reads-output`), so the pre-fill is tested here as
the dynamic defence behind it: a real Triton kernel (the interpreter on CPU) that keeps whatever finite value its
output already holds, run through the judge's own allocators.
"""

from __future__ import annotations

import threading
import time

import pytest
import torch
import triton
import triton.language as tl

from services.judge import run_cases
from services.judge.run_cases import (
    CallClock,
    CallExpired,
    Guard,
    prefill_pairs,
    recording,
    run_plain,
    stress,
    under_answers,
)


@triton.jit
def _trusting_double(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    old = tl.load(y_ptr + offs, mask=mask, other=0.0)  # reads its output: the candidate check refuses this
    tl.store(y_ptr + offs, tl.where(old == old, old, x * 2.0), mask=mask)  # keeps anything that is not NaN


@triton.jit
def _honest_double(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask, other=0.0) * 2.0, mask=mask)


def _op(kernel, empty):
    """A family-like wrapper: the output comes from `empty` (the judge's allocator), the kernel fills it."""

    def op(x):
        y = empty(x.shape, dtype=x.dtype, device=x.device)
        kernel[(triton.cdiv(x.numel(), 64),)](x, y, x.numel(), BLOCK=64)
        return y

    return op


@pytest.mark.parametrize("kernel,trusted", [(_trusting_double, True), (_honest_double, False)])
def test_an_output_pre_filled_with_another_cases_answer_catches_a_kernel_that_trusts_it(kernel, trusted):
    allocate = {"fn": None}
    op = _op(kernel, lambda shape, **kw: allocate["fn"](shape, **kw))
    cases = [torch.randn(4, 100, generator=torch.Generator().manual_seed(i)) for i in range(2)]
    answers = {}
    for i, x in enumerate(cases):  # the first pass: NaN-filled outputs, every kernel computes
        guard, kept = Guard(torch.device("cpu"), 5), []
        allocate["fn"] = recording(guard.empty, kept)
        done = run_cases.run_op_case(op, [x], lambda placed: placed, guard)
        assert done.problem is None and torch.equal(done.output, x * 2)
        answers[i] = [t.clone() for t in kept]
    guard = Guard(torch.device("cpu"), 5)
    allocate["fn"] = under_answers(guard.empty, answers[0])  # case 1 again, its output holding case 0's answer
    done = run_cases.run_op_case(op, [cases[1]], lambda placed: placed, guard)
    assert done.problem is None
    assert torch.equal(done.output, cases[0] * 2) is trusted  # the donor's answer came back
    assert torch.equal(done.output, cases[1] * 2) is not trusted


def test_pre_fill_pairs_are_drawn_from_the_seed_among_cases_of_one_signature():
    sigs = [("a",), ("b",), ("a",), ("a",), ("c",), ("b",), ("a",)]
    pairs = prefill_pairs(11, sigs, count=4)
    assert pairs == prefill_pairs(11, sigs, count=4)  # deterministic in the judging's seed
    assert len(pairs) == 4 and len({c for c, _ in pairs}) == 4
    for case, donor in pairs:
        assert case != donor and sigs[case] == sigs[donor] and sigs[case] != ("c",)
    assert len({tuple(prefill_pairs(seed, sigs)) for seed in range(20)}) > 1  # another judging, other cases
    assert prefill_pairs(3, [("a",), ("b",)]) == []  # nothing of one shape twice: nothing to pre-fill from


def test_a_call_past_its_limit_expires_while_still_running(monkeypatch):
    monkeypatch.setattr(run_cases, "call_limit_s", lambda moved, device: 0.2)
    fired: list = []
    clock = CallClock("cpu", expire=lambda fact: fired.append((fact, time.monotonic())))
    start = time.monotonic()
    with pytest.raises(CallExpired):
        with clock.call("case 3", (2, 3, 64), 3584):
            time.sleep(1.0)  # stands in for a kernel that will not come back soon
    ((fact, when),) = fired
    assert when - start < 0.9  # the watchdog's thread fired during the call, not after it
    assert fact["call"] == "case 3" and fact["shape"] == "2x3x64" and fact["limit_s"] == 0.2
    assert fact["detail"] == "case 3 at 2x3x64 was still running at its per-call limit of 0.2 s (3.6 kB moved)"


def test_a_call_in_time_is_only_recorded(monkeypatch):
    monkeypatch.setattr(run_cases, "call_limit_s", lambda moved, device: 5.0)
    clock = CallClock("cpu", expire=lambda fact: pytest.fail(f"expired: {fact}"))
    for i in range(3):
        with clock.call(f"case {i}", (1, 64), 512):
            time.sleep(0.01 * i)
    assert clock.slowest["call"] == "case 2" and 0 < clock.slowest["share"] < 0.1
    assert [t.name for t in threading.enumerate()].count("call-clock") >= 1


def test_a_call_that_came_back_late_expires_on_its_return(monkeypatch):
    now = iter([0.0, 30.0]).__next__  # the thread never woke (starved): the return sees it
    monkeypatch.setattr(run_cases, "call_limit_s", lambda moved, device: 20.0)
    fired: list = []
    clock = CallClock("cpu", expire=fired.append, now=lambda: now() if fired == [] else 30.0)
    clock._thread = threading.Thread()  # no watchdog thread: only the return can tell
    with pytest.raises(CallExpired):
        with clock.call("case 0", (1, 64), 512):
            pass
    assert fired and "ran 30.0 s, past its per-call limit of 20.0 s" in fired[0]["detail"]


def test_inputs_and_weights_are_checked_after_calls_that_are_no_case():
    x, w = torch.randn(2, 8), torch.randn(8)
    calls = {"n": 0}

    def forward(t):
        calls["n"] += 1
        if calls["n"] == 5:  # honest for four calls, then writes its input
            t[0, 0] = 0.0
        return t * w

    made, problem = stress(forward, x, 48, [w])
    assert made == 5 and problem["rule"] == "modified-input" and "further call 5 of 48" in problem["detail"]
    made, problem = stress(lambda t: w.mul_(1.0 + 1e-3), torch.randn(2, 8), 3, [w])
    assert made == 1 and problem["rule"] == "modified-weights"
    done = run_plain(lambda: w.add_(1.0), [torch.randn(2, 8), w], "called as production calls it")
    assert done.problem == ("modified-weights", "called as production calls it: the kernel wrote to its weights")
    done = run_plain(lambda: x * 2, [x, w], "called as production calls it")
    assert done.problem is None and torch.equal(done.output, x * 2)
