"""The child's side of correctness: run the candidate on the parent's cases, report what happened, judge nothing.

The parent (services.judge.verdict) drew the cases and computed the references in its own process;
here the candidate's wrapper runs each case and the outputs go back as plain tensors. What only
this process can see is recorded as facts per case, by code of ours (a candidate's source is
kernels only, so no author's Python runs here): the call raised, the output is not a plain tensor or
shares memory with an input, an input or weight changed (compared with a CPU copy the kernel cannot
reach), or guard bytes around a tensor the kernel touched were overwritten (an out-of-bounds write,
a counter kept past a tensor's end).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from services.judge.poison import NAN_BYTE

GUARD_BYTES = 512  # canaries each side: keeps the interior 512-byte aligned, as the caching allocator does


def random_bytes(count: int, seed: int) -> torch.Tensor:
    """`count` bytes drawn from `seed` (CPU, uint8): guard canaries and production-like fills that no kernel can
    recognise by a known value or a repeated byte."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randint(0, 256, (count,), generator=gen, dtype=torch.uint8)


class Guard:
    """Allocations surrounded by canary bytes (random per judging), checked after every call."""

    def __init__(self, device: torch.device, canary_seed: int):
        self.device = device
        self.canary = random_bytes(2 * GUARD_BYTES, canary_seed)
        self._canary_on_device = self.canary.to(device)
        self.raw: list[torch.Tensor] = []

    def empty(self, shape, *, dtype: torch.dtype, device=None, fill: int = NAN_BYTE) -> torch.Tensor:
        nbytes = math.prod(shape) * dtype.itemsize
        raw = torch.empty((GUARD_BYTES + nbytes + GUARD_BYTES,), dtype=torch.uint8, device=self.device)
        raw[:GUARD_BYTES] = self._canary_on_device[:GUARD_BYTES]
        raw[GUARD_BYTES + nbytes :] = self._canary_on_device[GUARD_BYTES:]
        inner = raw[GUARD_BYTES : GUARD_BYTES + nbytes]
        inner.fill_(fill)
        self.raw.append(raw)
        return inner.view(dtype).view(tuple(shape))

    def place(self, tensor: torch.Tensor) -> torch.Tensor:
        out = self.empty(tensor.shape, dtype=tensor.dtype)
        out.copy_(tensor.to(self.device))
        return out

    def broken(self) -> int:
        """How many guarded allocations had a canary overwritten."""
        count = 0
        for raw in self.raw:
            ends = torch.cat([raw[:GUARD_BYTES], raw[-GUARD_BYTES:]]).cpu()
            count += int(not torch.equal(ends, self.canary))
        return count


@dataclass
class CaseRun:
    output: torch.Tensor | None = None  # on the CPU; None when there is no tensor to return
    problem: tuple[str, str] | None = None  # (rule, what happened)


@dataclass
class Runs:
    outputs: list[CaseRun] = field(default_factory=list)  # in case order; the first pass stops at a problem

    def problems(self) -> list[dict]:
        runs = enumerate(self.outputs)
        return [{"case": i, "rule": r.problem[0], "detail": r.problem[1]} for i, r in runs if r.problem]


def _storages(*tensors: torch.Tensor) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in tensors if t.untyped_storage().nbytes() > 0}


def _call(fn: Callable, *args) -> tuple[object, CaseRun | None]:
    """(the candidate's output, None), or (None, the problem) when it raised or returned no plain tensor."""
    try:
        with torch.no_grad():
            out = fn(*args)
    except Exception as exc:  # the candidate raising is a fact for the parent, not a crash of the child
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


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit for bit (NaN inputs included, which == would call changed)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


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


def stress(forward: Callable[[torch.Tensor], object], x: torch.Tensor, calls: int) -> int:
    """Call the candidate `calls` times without looking (CPU stands in for the timing calls). Returns calls made."""
    with torch.no_grad():
        for _ in range(calls):
            forward(x)
    return calls
