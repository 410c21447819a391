"""The child's side of correctness: run the candidate on the parent's cases, report what happened, judge nothing.

The parent (services.judge.verdict) drew the cases and computed the references in its own process;
here the candidate's wrapper runs each case and the outputs go back as plain tensors. What only
this process can see is recorded as facts per case, by code of ours (a candidate's source is
kernels only, so no author's Python runs here): the call raised, the output is not a plain tensor or
shares memory with an input, an input or weight changed (compared with a CPU copy the kernel cannot
reach), or guard bytes around a tensor the kernel touched were overwritten (an out-of-bounds write,
a counter kept past a tensor's end). Every call runs under a `CallClock`: a call past its limit (proportional
to the bytes it moves: services.core.call_limits) ends the judging as `timeout`, naming the call.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

import torch

from services.core.call_limits import call_bytes, call_limit_s, describe
from services.core.shapes import shape_text
from services.core.tolerances import same_bits
from services.judge import gpu_fence
from services.judge.fence import Fenced
from services.judge.poison import NAN_BYTE

GUARD_BYTES = 512  # canaries each side: keeps the interior 512-byte aligned, as the caching allocator does


def random_bytes(count: int, seed: int) -> torch.Tensor:
    """`count` bytes drawn from `seed` (CPU, uint8): guard canaries and production-like fills that no kernel can
    recognise by a known value or a repeated byte."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randint(0, 256, (count,), generator=gen, dtype=torch.uint8)


def fences_stand(device: torch.device) -> bool:
    """Whether a tensor on `device` can stand against inaccessible memory: always on a CPU (services.judge.fence), on
    a GPU where its driver maps unmapped zones (services.judge.gpu_fence)."""
    return device.type == "cpu" or gpu_fence.available(device)


class Guard:
    """Allocations surrounded by canary bytes (random per judging), checked after every call. One side of each is
    inaccessible memory instead of a canary (services.judge.fence on a CPU, services.judge.gpu_fence's unmapped
    addresses on a GPU whose driver maps them): past its end, or with `front` before its start. A read there, which
    no canary sees, faults. The sandbox child fences every case's first run at the end (a ragged block read with no
    mask, the common slip, meets it at every shape drawn) and every case's run again at the start. A GPU without
    the driver's calls keeps canaries on both sides."""

    def __init__(self, device: torch.device, canary_seed: int, *, front: bool = False):
        self.device = device
        self.canary = random_bytes(2 * GUARD_BYTES, canary_seed)
        self._canary_on_device = self.canary.to(device)
        self.front = front
        head = (slice(0, GUARD_BYTES), slice(0, GUARD_BYTES))  # (where in an allocation, which canary bytes)
        tail = (slice(-GUARD_BYTES, None), slice(GUARD_BYTES, None))
        self.fenced = fences_stand(device)
        # the sides that hold a canary: the one away from the fence; both where there is none
        self._spans = ([tail] if front else [head]) if self.fenced else [head, tail]
        self._expected = torch.cat([self.canary[which] for _, which in self._spans])
        self.raw: list[torch.Tensor] = []
        self._fences: list[Fenced] = []  # the CPU's mappings, kept alive with the tensors placed in them

    def empty(self, shape, *, dtype: torch.dtype, device=None, fill: int = NAN_BYTE) -> torch.Tensor:
        nbytes = math.prod(shape) * dtype.itemsize
        size = nbytes + GUARD_BYTES * len(self._spans)
        if self.device.type == "cpu":  # [canary][tensor]|fence, or with `front` fence|[tensor][canary]
            fence = Fenced(size, at_start=self.front)
            self._fences.append(fence)
            raw = torch.frombuffer(fence.buffer, dtype=torch.uint8)
        elif self.fenced:  # the same on a GPU (the tensor holds its mapping)
            raw = gpu_fence.fenced_bytes(size, gpu_fence.device_index(self.device), at_start=self.front)
        else:  # [canary][tensor][canary]
            raw = torch.empty((size,), dtype=torch.uint8, device=self.device)
        for where, which in self._spans:
            raw[where] = self._canary_on_device[which]
        start = 0 if self.fenced and self.front else GUARD_BYTES
        inner = raw[start : start + nbytes]
        inner.fill_(fill)
        self.raw.append(raw)
        return inner.view(dtype).view(tuple(shape))

    def place(self, tensor: torch.Tensor) -> torch.Tensor:
        out = self.empty(tensor.shape, dtype=tensor.dtype)
        out.copy_(tensor.to(self.device))
        return out

    def broken(self) -> int:
        """How many guarded allocations had a canary overwritten (a write on a fence's side faulted already)."""
        count = 0
        for raw in self.raw:
            got = torch.cat([raw[where] for where, _ in self._spans]).cpu()
            count += int(not torch.equal(got, self._expected))
        return count


@dataclass
class CaseRun:
    output: torch.Tensor | None = None  # on the CPU; None when there is no tensor to return
    problem: tuple[str, str] | None = None  # (rule, what happened)

    def fact(self, case: int) -> dict:
        """Its problem as the child reports one to the parent (services.judge.verdict reads it by case)."""
        return {"case": case, "rule": self.problem[0], "detail": self.problem[1]}


@dataclass
class Runs:
    outputs: list[CaseRun] = field(default_factory=list)  # in case order; the first pass stops at a problem

    def problems(self) -> list[dict]:
        return [r.fact(i) for i, r in enumerate(self.outputs) if r.problem]


def _storages(*tensors: torch.Tensor) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in tensors if t.untyped_storage().nbytes() > 0}


def _call(fn: Callable, *args) -> tuple[object, CaseRun | None]:
    """(the candidate's output, None), or (None, the problem) when it raised or returned no plain tensor."""
    try:
        with torch.no_grad():
            out = fn(*args)
    except Exception as exc:  # the candidate raising is a fact for the parent, not a crash of the child
        gpu_fence.exit_on_fault(exc)  # unless it faulted the GPU (services.judge.gpu_fence): memory-fault
        return None, CaseRun(problem=("raised", f"{type(exc).__name__}: {exc}"[:500]))
    if type(out) is not torch.Tensor:
        return None, CaseRun(problem=("not-a-tensor", f"the wrapper returned a {type(out).__name__}"))
    return out, None


def _finished(out: torch.Tensor, guard: Guard) -> CaseRun:
    """The case's output (CPU), unless a guard region around the call's tensors was overwritten."""
    broken = guard.broken()
    if broken:
        return CaseRun(problem=("guard-bytes", f"{broken} guard region(s) around the call's tensors were overwritten"))
    return CaseRun(output=out.detach().cpu())


def run_case(
    forward: Callable[[torch.nn.Module, tuple, dict], object],  # services.core.kernels.bind's call
    module: torch.nn.Module,
    state: dict[str, torch.Tensor],
    base: torch.Tensor,
    layout: Callable[[torch.Tensor], torch.Tensor],
    guard: Guard,
) -> CaseRun:
    """One call of the candidate on one case: its output (CPU) or the first problem seen.

    `state` is the case's module tensors by attribute (the weight, a LayerNorm's bias), set on `module`."""
    x = layout(guard.place(base))
    live = {attr: guard.place(value) for attr, value in state.items()}
    with torch.no_grad():
        for attr, value in live.items():
            getattr(module, attr).data = value
    x_before = x.cpu().clone()
    out, problem = _call(forward, module, (x,), {})
    if problem:
        return problem
    if _storages(out) & _storages(x, *live.values()):
        return CaseRun(problem=("aliases-input", "the output shares memory with the input or the module's tensors"))
    if not same_bits(x.cpu(), x_before):
        return CaseRun(problem=("modified-input", "the kernel wrote to its input"))
    for attr, value in live.items():
        if not same_bits(value.cpu(), state[attr]):
            return CaseRun(problem=("modified-weights", f"the kernel wrote to the module's {attr}"))
    return _finished(out, guard)


def run_op_case(
    op: Callable[..., object],
    bases: list[torch.Tensor],
    view: Callable[[list[torch.Tensor]], list[torch.Tensor]],
    guard: Guard,
) -> CaseRun:
    """One call of an op of several operands (a gated MLP's gate and up; RoPE's q, k, cos and sin) on one case:
    its output or the first problem seen. The operands are placed in guarded memory and `view` lays them out as
    the op is called with them. `op` returns a tensor (our code flattens an op of several outputs)."""
    inputs = view([guard.place(base) for base in bases])
    before = [t.cpu().clone() for t in inputs]
    out, problem = _call(op, *inputs)
    if problem:
        return problem
    if _storages(out) & _storages(*inputs):
        return CaseRun(problem=("aliases-input", "the output shares memory with an operand"))
    for i, (now, then) in enumerate(zip(inputs, before, strict=True)):
        if not same_bits(now.cpu(), then):
            return CaseRun(problem=("modified-input", f"the kernel wrote to its operand {i}"))
    return _finished(out, guard)


def under_fill(byte: int) -> Callable:
    """An `empty` for the wrapper that leaves `byte` in the output's fresh memory (the ghost's NaN)."""

    def allocate(shape, *, dtype, device):
        out = torch.empty(shape, dtype=dtype, device=device)
        out.view(torch.uint8).fill_(byte)
        return out

    return allocate


def under_random_fill(seed: int) -> Callable:
    """An `empty` that leaves random bytes (drawn from `seed`) in the output's memory: production-like, no
    pattern a kernel could take for the judge's."""

    def allocate(shape, *, dtype, device):
        out = torch.empty(shape, dtype=dtype, device=device)
        flat = out.view(torch.uint8).view(-1)
        flat.copy_(random_bytes(flat.numel(), seed).to(flat.device))
        return out

    return allocate


def stress(
    forward: Callable[[torch.Tensor], object], x: torch.Tensor, calls: int, state: list[torch.Tensor] = (), clock=None
) -> tuple[int, dict | None]:
    """Call the candidate `calls` times without looking at its answers (CPU stands in for the timing calls), each
    under `clock` where one is given. Returns (calls made, the problem or None): the input `x` and the module's
    `state` must be bit-identical after every call (a kernel that writes its input only after the checked
    cases is still caught)."""
    before = [t.detach().cpu().clone() for t in (x, *state)]
    moved = call_bytes(t.nbytes for t in (x, *state))
    with torch.no_grad():
        for i in range(calls):
            with clock.call(f"further call {i + 1}", x.shape, moved) if clock else nullcontext():
                forward(x)
            problem = unchanged([x, *state], before, f"further call {i + 1} of {calls}")
            if problem:
                return i + 1, problem
    return calls, None


def unchanged(now: list[torch.Tensor], before: list[torch.Tensor], when: str, inputs: int = 1) -> dict | None:
    """None when each tensor of `now` (its first `inputs` the call's inputs, the rest the module's state) is
    bit-identical to its copy in `before`; else the problem, as a fact for the parent (`modified-input` or
    `modified-weights`)."""
    for i, (tensor, then) in enumerate(zip(now, before, strict=True)):
        if not same_bits(tensor.detach().cpu(), then):
            rule, what = ("modified-input", f"its input {i}") if i < inputs else ("modified-weights", "its weights")
            return {"rule": rule, "detail": f"{when}: the kernel wrote to {what}"}
    return None


def run_plain(call: Callable[[], object], watched: list[torch.Tensor], when: str, inputs: int = 1) -> CaseRun:
    """A call in plain memory, as production makes it (no guard bytes): its output (CPU), unless it raised, returned
    no plain tensor, or wrote to one of `watched` (its first `inputs` the call's inputs, the rest module state)."""
    before = [t.detach().cpu().clone() for t in watched]
    out, problem = _call(call)
    if problem:
        return problem
    changed = unchanged(watched, before, when, inputs)
    if changed:
        return CaseRun(problem=(changed["rule"], changed["detail"]))
    return CaseRun(output=out.detach().cpu())


# ---------------------------------------------------------------- outputs pre-filled with another input's answer

PREFILLED_CASES = 4  # cases run again with their output holding another case's answer


def prefill_pairs(seed: int, signatures: list, count: int = PREFILLED_CASES) -> list[tuple[int, int]]:
    """(case, donor) pairs, drawn from `seed` (the judging's): up to `count` cases, each given a donor, another
    case whose output has the same signature (its outputs' shapes and dtypes). The case runs again with its
    output's memory holding the donor's answer, as production's allocator hands back a block that held the last
    answer: a kernel that trusts an output which already looks plausible returns the donor's answer."""
    rng = random.Random(seed)
    groups: dict = {}
    for index, signature in enumerate(signatures):
        groups.setdefault(signature, []).append(index)
    eligible = [i for i, sig in enumerate(signatures) if len(groups[sig]) > 1]
    chosen = sorted(rng.sample(eligible, min(count, len(eligible))))
    return [(j, rng.choice([i for i in groups[signatures[j]] if i != j])) for j in chosen]


def recording(allocate: Callable, sink: list) -> Callable:
    """An `empty` for the wrapper that allocates with `allocate` and keeps each output it hands out in `sink`."""

    def empty(shape, *, dtype, device):
        out = allocate(shape, dtype=dtype, device=device)
        sink.append(out)
        return out

    return empty


def under_answers(allocate: Callable, answers: list[torch.Tensor]) -> Callable:
    """An `empty` for the wrapper whose k-th output holds `answers[k]` (another case's k-th output, same shape and
    dtype) instead of `allocate`'s fill."""
    handed = iter(answers)

    def empty(shape, *, dtype, device):
        out = allocate(shape, dtype=dtype, device=device)
        answer = next(handed, None)
        if answer is not None and tuple(answer.shape) == tuple(out.shape) and answer.dtype == out.dtype:
            out.copy_(answer.to(out.device))
        return out

    return empty


# ---------------------------------------------------------------- the per-call limit


class CallExpired(BaseException):
    """A call ran past its limit and the clock's `expire` returned (tests; the child's never returns)."""


class CallClock:
    """A watchdog over each call of the candidate, armed with the call's limit (services.core.call_limits) before
    it and disarmed after. A call past its limit may never come back to us (a kernel in a loop of 10^9 steps,
    under the interpreter or on the GPU), so a thread of the watchdog's own calls `expire(fact)` at the deadline:
    the child writes its answer with the fact (`call_timeout`) and exits. A call that came back late anyway (the
    thread starved of the CPU) expires on its return. `slowest` is the slowest call that returned in time, as a
    fact: evidence of how near an honest kernel came to its limit."""

    def __init__(self, device: str, expire: Callable[[dict], None], now: Callable[[], float] = time.monotonic):
        self.device, self._expire, self._now = device, expire, now
        self._cond = threading.Condition()
        self._armed: dict | None = None
        self._thread: threading.Thread | None = None
        self._state = "idle"  # idle | fired | expired (expire returned: only in tests)
        self.slowest: dict | None = None

    def _fact(self, armed: dict, seconds: float | None) -> dict:
        fact = {k: armed[k] for k in ("call", "shape", "bytes", "limit_s")}
        fact["detail"] = describe(armed["call"], armed["shape"], armed["bytes"], armed["limit_s"], seconds)
        return fact

    def _watch(self) -> None:
        with self._cond:
            while True:
                armed = self._armed
                left = armed["deadline"] - self._now() if armed else None
                if left is None or left > 0:
                    self._cond.wait(left)
                    continue
                self._state = "fired"
                fact = self._fact(armed, None)
                break
        self._finish(fact)

    def _finish(self, fact: dict) -> None:
        self._expire(fact)  # the child's writes its answer and exits: what follows runs only in tests
        with self._cond:
            self._state = "expired"
            self._cond.notify_all()

    @contextmanager
    def call(self, what: str, shape, bytes_moved: int) -> Iterator[None]:
        limit = call_limit_s(bytes_moved, self.device)
        start = self._now()
        armed = {"call": what, "shape": shape_text(tuple(shape)), "bytes": int(bytes_moved), "limit_s": limit,
                 "deadline": start + limit}  # fmt: skip
        with self._cond:
            self._armed = armed
            if self._thread is None:  # started at the first call: after the walls (a namespace wants one thread)
                self._thread = threading.Thread(target=self._watch, name="call-clock", daemon=True)
                self._thread.start()
            self._cond.notify_all()
        try:
            yield
        finally:
            seconds = self._now() - start
            with self._cond:
                self._armed = None
                self._cond.notify_all()
                while self._state == "fired":  # the watchdog is ending the child: never go on
                    self._cond.wait()
                expired = self._state == "expired"
            if expired:
                raise CallExpired(armed["call"])
            if seconds > limit:
                with self._cond:
                    self._state = "fired"
                self._finish(self._fact(armed, seconds))
                raise CallExpired(armed["call"])
            if self.slowest is None or seconds / limit > self.slowest["share"]:
                self.slowest = {k: armed[k] for k in ("call", "shape", "bytes", "limit_s")}
                self.slowest.update(seconds=round(seconds, 4), share=seconds / limit)
