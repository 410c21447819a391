"""Patching a judged kernel into every live instance of a module class, and taking it out again exactly.

A swap is all or nothing: either every instance of the target class serves the kernel, or none does.
The patch is an instance attribute `forward` (a bound method), so `nn.Module.__call__` and its hooks
keep working and reverting is deleting (or restoring) that one attribute.

Once committed, a kernel that raises while serving does not fail the request: that call is answered
by the module's own forward, every instance goes back to it at once, and the failure is reported
(the server turns it into a RollbackRequested). Before commit an error propagates: parity sees it.
"""

from __future__ import annotations

import contextlib
import contextvars
import types
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

from services.core.kernels import bind
from services.core.pb import events_pb2 as pb
from services.ops import Answered
from services.ops.hub_functions import plain_function
from services.ops.launch import next_pow2
from services.server.functions import FunctionSite, site_of
from services.server.introspection import class_path, instances_of

# A layer (a gated MLP) is patched exactly as a module class is: its forward, on every instance; the contract
# binds its submodules, which keep serving inside the rewritten forward.
# A function (a modeling file's apply_rotary_pos_emb) is swapped by replacing its module global, the one
# name every caller looks up (services.server.functions).
SUPPORTED_KINDS = ("module_class", "layer", "function")
KERNEL_MARK = "__yantra_kernel__"  # set on a swapped-in function: its output is no reference for parity
_MISSING = object()


class SwapRefused(RuntimeError):
    """The contract cannot be applied to the served model (no instance matches, unsupported kind, ...)."""


@dataclass
class _Patched:
    module: torch.nn.Module
    previous: object  # the instance's own `forward` before the swap, or _MISSING when it had none


_forwards_version = 0  # bumped whenever a swap patches or restores forwards: captured CUDA graphs go stale


def forwards_version() -> int:
    """Changes whenever any module's forward is patched or restored (services.server.batch_decode captures again)."""
    return _forwards_version


def _forwards_changed() -> None:
    global _forwards_version
    _forwards_version += 1


SAMPLES_KEPT = 8  # live inputs a committed swap keeps for the shadow check (services.server.shadow)
SAMPLE_EVERY = 64  # beyond the first call of each new size: one call in this many is kept


PLAIN_VALUES = (type(None), bool, int, float, str)  # what a recorded call may carry beside tensors


# Set by the engine around a forward that starts from an empty KV cache (a request's first prefill): its layers'
# calls attend only to their own tokens, so the shadow check can replay them with no cache at all.
_FIRST_FORWARD = contextvars.ContextVar("first_forward", default=False)


@contextlib.contextmanager
def first_forward() -> Iterator[None]:
    """Around a forward whose KV cache starts empty (engine thread)."""
    token = _FIRST_FORWARD.set(True)
    try:
        yield
    finally:
        _FIRST_FORWARD.reset(token)


def _is_cache(value) -> bool:
    from transformers.cache_utils import Cache

    return isinstance(value, Cache)


def without_cache(args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
    """A call carrying a KV cache as a call without it, where that is the same computation: in a forward that
    started from an empty cache (`first_forward`) a layer attends to its own tokens only. None otherwise (a
    decode step attends to what the cache holds: replayed without it, it is another computation; replayed
    with it, it would append to a live request's cache)."""
    if not _FIRST_FORWARD.get():
        return None
    args = tuple(None if _is_cache(a) else a for a in args)
    kwargs = {k: None if _is_cache(v) else v for k, v in kwargs.items()}
    return (args, kwargs) if replayable(args) and replayable(kwargs) else None


def replayable(value) -> bool:
    """Whether a call's arguments are data a replay can run again: tensors and plain values, in tuples, lists
    and dicts (not a cache object, whose state a replay would change)."""
    if isinstance(value, (torch.Tensor, *PLAIN_VALUES)):
        return True
    if isinstance(value, (tuple, list)):
        return all(replayable(v) for v in value)
    if isinstance(value, dict):
        return all(replayable(v) for v in value.values())
    return False


@dataclass
class SwapHandle:
    target: str
    patched: list[_Patched] = field(default_factory=list)
    reverted: bool = False
    on_failure: Callable[[str], None] | None = None  # set at commit: a live error then falls back, reported here
    failure: str = ""  # the first error the kernel raised while serving; "" while it never has
    # Real inputs of live calls (module, args, kwargs), cloned: the shadow check replays them against the
    # module's own forward. The first call of each size (rows rounded up to a power of two) is always kept.
    samples: deque = field(default_factory=lambda: deque(maxlen=SAMPLES_KEPT))
    calls: int = 0
    sizes_seen: set = field(default_factory=set)

    def sample(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        self.calls += 1
        if not replayable(args) or not replayable(kwargs):
            plain = without_cache(args, kwargs)  # a decoder layer's call carries the request's KV cache
            if plain is None:
                return
            args, kwargs = plain
        first = args[0] if args else next(iter(kwargs.values()), None)
        rows = first.numel() // max(1, first.shape[-1]) if isinstance(first, torch.Tensor) and first.dim() else 0
        size = next_pow2(rows)
        if size in self.sizes_seen and self.calls % SAMPLE_EVERY:
            return
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            return  # a decode step being captured: a clone here would join the graph and run on every replay
        self.sizes_seen.add(size)
        clone = lambda v: v.detach().clone() if isinstance(v, torch.Tensor) else v  # noqa: E731
        self.samples.append((module, tuple(clone(a) for a in args), {k: clone(v) for k, v in kwargs.items()}))

    def drifted(self, problem: str) -> None:
        """The shadow check found the committed kernel off the module's own forward: every instance goes back
        to it now, and the failure is reported once (as a live error is)."""
        if self.failure or self.reverted:
            return
        self.failure = problem[:500]
        self.revert()
        if self.on_failure is not None:
            self.on_failure(self.failure)

    @property
    def modules(self) -> list[torch.nn.Module]:
        return [p.module for p in self.patched]

    def own_forward(self, module) -> Callable:
        if isinstance(module, FunctionSite):  # the function the global held before the swap
            return next(p.previous for p in self.patched if p.module == module)
        previous = next((p.previous for p in self.patched if p.module is module), _MISSING)
        return type(module).forward.__get__(module) if previous is _MISSING else previous

    def fall_back(self, module: torch.nn.Module, error: Exception, args: tuple, kwargs: dict):
        """The committed kernel raised on a live call: answer it with the module's own forward.

        If that raises too, the input is at fault, not the kernel: its error propagates and the swap
        stays. Otherwise every instance is reverted now (the rest of this pass included) and the failure
        is reported once. A layer rewrite whose kernel failed after a child with state ran (a decoder
        layer's attention, which appended to the KV cache) answered the call itself (`ops.Answered`): its
        answer stands, and the layer is not run again.
        """
        answered = isinstance(error, Answered)
        out = error.answer if answered else self.own_forward(module)(*args, **kwargs)
        if answered:
            error = error.__cause__ or error
        if not self.failure:
            self.failure = f"{type(error).__name__}: {error}"[:500]
            self.revert()
            if self.on_failure is not None:
                self.on_failure(self.failure)
        return out

    def revert(self) -> None:
        """Restore exactly what each instance had: its own `forward` attribute, or none at all."""
        if self.reverted:
            return
        for p in reversed(self.patched):
            if isinstance(p.module, FunctionSite):
                p.module.set(p.previous)
            elif p.previous is _MISSING:
                p.module.__dict__.pop("forward", None)
            else:
                p.module.__dict__["forward"] = p.previous
        self.reverted = True
        _forwards_changed()


def serve(handle: SwapHandle, owner, call: Callable, args: tuple, kwargs: dict):
    """One live call of a swapped kernel (`call(owner, args, kwargs)`, the binder's). Before commit an error is
    parity's verdict; once committed it falls back to `owner`'s own code and reverts the swap, and some real
    inputs are kept for the shadow check."""
    try:
        out = call(owner, args, kwargs)
    except Exception as exc:
        if handle.on_failure is None:
            raise
        return handle.fall_back(owner, exc, args, kwargs)
    if handle.on_failure is not None:
        handle.sample(owner, args, kwargs)
    return out


def kernel_forward(entry: Callable, contract: pb.Contract, handle: SwapHandle) -> Callable:
    """forward(self, *inputs) calling `entry` through the one binder the judge uses too (kernels.bind).

    Once the swap is committed (`handle.on_failure` set), an error falls back to the module's own forward.
    """
    call = bind(contract, entry)

    def forward(self, *args, **kwargs):
        return serve(handle, self, call, args, kwargs)

    forward.__name__ = f"kernel_forward[{getattr(entry, '__name__', 'entry')}]"
    return forward


def apply_swap(model: torch.nn.Module, contract: pb.Contract, entry: Callable) -> SwapHandle:
    """Patch every instance whose exact class is `contract.target` and that holds every attribute the contract
    binds; SwapRefused when none can be patched."""
    kind = contract.kind or "module_class"
    if kind not in SUPPORTED_KINDS:
        raise SwapRefused(f"contract kind {kind!r} is not served yet (supported: {', '.join(SUPPORTED_KINDS)})")
    if not contract.target:
        raise SwapRefused("the contract names no target class")
    if kind == "function":
        return _apply_function(contract, entry)
    instances = instances_of(model, contract.target)
    if not instances:
        present = sorted({class_path(m) for m in model.modules()})
        raise SwapRefused(
            f"no module of class {contract.target} in the served model; its classes are: {', '.join(present)}"
        )
    # Only instances holding every bound attribute: one class may build instances without one (Gemma 4's v norm
    # has no weight), which keep their own forward; parity then replays every instance's recorded calls. An
    # attribute held as None (a LayerNorm built without its bias) is held: the wrapper takes None where optional.
    instances = [m for m in instances if all(hasattr(m, b.attr) for b in contract.bindings)]
    if not instances:
        missing = ", ".join(f"{b.attr!r} (bound to {b.param!r})" for b in contract.bindings)
        raise SwapRefused(f"no instance of {contract.target} holds every attribute the contract binds: {missing}")
    handle = SwapHandle(contract.target)
    fn = kernel_forward(entry, contract, handle)
    try:
        for module in instances:
            handle.patched.append(_Patched(module, module.__dict__.get("forward", _MISSING)))
            module.__dict__["forward"] = types.MethodType(fn, module)
    except BaseException:
        handle.revert()
        raise
    _forwards_changed()
    return handle


def _apply_function(contract: pb.Contract, entry: Callable) -> SwapHandle:
    """Replace the module global `contract.target` with the kernel (through the one binder the judge uses); once
    committed, an error falls back to the function it replaced."""
    site = site_of(contract.target)
    if site is None:
        raise SwapRefused(f"no function {contract.target} to swap in the served model's modules")
    handle = SwapHandle(contract.target)
    call = bind(contract, entry)

    def swapped(*args, **kwargs):
        return serve(handle, site, call, args, kwargs)

    setattr(swapped, KERNEL_MARK, True)
    # its signature is the function's (services.server.functions.function_params), a hub-kernel module's too
    swapped.__wrapped__ = plain_function(site.current) or site.current
    swapped.__name__ = f"kernel_function[{getattr(entry, '__name__', 'entry')}]"
    handle.patched.append(_Patched(site, site.current))
    site.set(swapped)
    _forwards_changed()
    return handle


def is_patched(module: torch.nn.Module) -> bool:
    return "forward" in module.__dict__
