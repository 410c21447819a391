"""Launching a @triton.jit kernel with Triton's per-call work done once per specialisation.

`kernel[grid](...)` binds the arguments, computes the specialisation key (dtype and 16-byte alignment of
each pointer, whether an int is 1 or a multiple of 16, its width), looks the compiled kernel up and only
then launches. On the H200 host that is ~17-25 us of a candidate's call, where torch's native norm costs
11-17 us in all (`python bench/host_per_call.py`): a kernel faster on the GPU lost to eager callers.

A `Launcher` computes the same key itself, keeps the compiled kernel Triton returned the first time it saw
that key, and launches it directly the next time (`compiled[grid](*arguments)`, ~9-13 us). The key is never
coarser than Triton's: a pointer's alignment and dtype, an int's value class, a float, None. Anything it
does not know (another argument type, the interpreter, a Triton whose compiled kernel has no launcher)
takes Triton's own path, always; a direct launch that fails before launching switches this launcher to
Triton's path for good.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Mapping, Sequence

log = logging.getLogger(__name__)

ALIGN = 16  # Triton specialises pointers and ints on divisibility by 16


# What a persistent grid's "sms" (the program count of one wave) is where no GPU runs it: the interpreter. A GPU
# judge's fenced pass sets it to its GPU's own count (services.judge.fenced_pass), so that the interpreted launch
# has the GPU's program count, and a kernel whose addresses depend on that count meets its fence the same way.
INTERPRETER_SMS_ENV = "YANTRA_INTERPRETER_SMS"
INTERPRETER_SMS = 4  # a persistent grid still walks several rows per program


def stream_processors(device) -> int:
    """The streaming multiprocessors a launch on `device` fills: the GPU's own, or the interpreter's stand-in."""
    if device.type != "cuda":
        return int(os.environ.get(INTERPRETER_SMS_ENV) or INTERPRETER_SMS)
    return _cuda_sms(device)


@functools.lru_cache(maxsize=16)
def _cuda_sms(device) -> int:
    import torch

    return torch.cuda.get_device_properties(device).multi_processor_count


def next_pow2(n: int) -> int:
    """The next power of two >= n (1 for n <= 1): Triton's block shapes, and size buckets."""
    return 1 << max(0, n - 1).bit_length()


@functools.lru_cache(maxsize=4096)
def _int_spec(value: int) -> tuple:
    # Triton: 1 is a constant, a multiple of 16 is marked so, and the width is i32, i64 or u64
    return ("i", value == 1, value % ALIGN == 0, -(2**31) <= value < 2**31, -(2**63) <= value < 2**63)


def _spec(value) -> object:
    """This argument's share of Triton's specialisation key (a finer one is safe, a coarser one is not). Called
    for every argument of every launch: the common types are told apart by their exact type first (a decode
    call's host time is what this path exists to cut)."""
    kind = type(value)
    if kind is int:
        return _int_spec(value)
    if value is None:
        return None
    if kind is bool:
        return ("b", value)
    if kind is float:
        return "f"
    if isinstance(value, _tensor_type()):
        return (value.dtype, value.data_ptr() % ALIGN == 0)
    if isinstance(value, int):  # an int subclass (bool has none: it is caught above)
        return _int_spec(int(value))
    if isinstance(value, float):
        return "f"
    raise TypeError(f"no direct launch for a {type(value).__name__} argument")


@functools.cache
def _tensor_type() -> type:
    import torch

    return torch.Tensor


class Launcher:
    def __init__(self, kernel, options: Mapping[str, int]):
        """`kernel` a loaded @triton.jit function (its runtime parameters first, then its constexprs, as the
        family's plan check requires); `options` Triton's launch options (num_warps, num_stages)."""
        self.kernel, self.options = kernel, dict(options)
        params = getattr(kernel, "params", None)  # the interpreter's kernels have none: Triton's path only
        self.direct = params is not None and hasattr(kernel, "arg_names")
        constexprs = [p for p in params or () if p.is_constexpr]
        self.runtime_count = len(params or ()) - len(constexprs)
        self.tail_names = tuple(p.name for p in constexprs)  # a direct launch passes every parameter in order
        self.defaults = {p.name: p.default for p in constexprs if getattr(p, "has_default", False)}
        self.compiled: dict[tuple, object] = {}
        self.direct_calls = 0  # launches that skipped Triton's binding (tests and benchmarks read it)

    def __call__(self, grid: int, args: Sequence, constexprs: Mapping[str, object]) -> None:
        """Launch on `grid` programs with the runtime `args` in order and the plan's `constexprs`."""
        key = None
        if self.direct and len(args) == self.runtime_count:
            try:
                key = (tuple(_spec(a) for a in args), tuple(constexprs.items()), _device())
            except TypeError:
                key = None
            compiled = self.compiled.get(key) if key is not None else None
            if compiled is not None:
                values = {**self.defaults, **constexprs}
                try:
                    compiled[(grid, 1, 1)](*args, *(values[n] for n in self.tail_names))
                    self.direct_calls += 1
                    return
                except (TypeError, KeyError) as exc:  # a Triton whose launcher takes other arguments: its own path
                    log.warning("direct launch of %s failed (%s): Triton's own launch from now on", self.name, exc)
                    self.direct, self.compiled = False, {}
        compiled = self.kernel[(grid,)](*args, **constexprs, **self.options)
        if key is not None and _launchable(compiled):
            self.compiled[key] = compiled

    @property
    def name(self) -> str:
        return getattr(self.kernel, "__name__", "kernel")


def launch_options(launch) -> dict[str, int]:
    """Triton's launch options a plan's `KernelLaunch` sets (num_stages only where the plan names one)."""
    return {"num_warps": launch.num_warps, **({"num_stages": launch.num_stages} if launch.num_stages else {})}


def _launchable(compiled) -> bool:
    return all(hasattr(compiled, a) for a in ("run", "function", "packed_metadata", "__getitem__"))


def _device() -> int:
    cuda = _cuda()
    return cuda.current_device() if cuda is not None else -1


@functools.cache
def _cuda():
    """torch.cuda where a GPU is (asked once: it does not come or go while a process runs), else None."""
    import torch

    return torch.cuda if torch.cuda.is_available() else None


def direct_launches(fn: Callable) -> int:
    """How many of a family wrapper's launches skipped Triton's binding (0 for anything else)."""
    return sum(launcher.direct_calls for launcher in getattr(fn, "launchers", ()))
