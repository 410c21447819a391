"""Patching a judged kernel into every live instance of a module class, and taking it out again exactly.

A swap is all or nothing: either every instance of the target class serves the kernel, or none does.
The patch is an instance attribute `forward` (a bound method), so `nn.Module.__call__` and its hooks
keep working and reverting is deleting (or restoring) that one attribute.

Once committed, a kernel that raises while serving does not fail the request: that call is answered
by the module's own forward, every instance goes back to it at once, and the failure is reported
(the server turns it into a RollbackRequested). Before commit an error propagates: parity sees it.

Once committed, live calls are also watched (`SwapHandle.watch`): the first `shadow_calls` eager calls after the
commit, and from then on the first call of every new size, are checked inline against the module's own forward
on a copy of their inputs taken before the kernel ran (services.server.shadow.check_inline), and some are kept
for the periodic shadow pass. What is checked, and why CUDA graph replays are not, is said there.

Over 400 lines, one file: a swap's whole life (apply, serve, watch, fall back, revert) is one state machine on one
handle, and a committed kernel's every call passes through all of it; the pure parts live apart (routing,
call_watch, shadow, functions).
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import types
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

from services.core.call_limits import call_bytes
from services.core.kernels import bind
from services.core.pb import events_pb2 as pb
from services.core.settings import Settings
from services.core.tolerances import same_bits
from services.ops import Answered
from services.ops.hub_functions import plain_function
from services.ops.launch import next_pow2
from services.server import call_watch
from services.server.call_watch import LiveClock
from services.server.functions import FunctionSite, site_of
from services.server.introspection import class_path, instances_of
from services.server.routing import ServingPlan, call_rows

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


_serials = itertools.count(1)
_serving: set[int] = set()  # serials of the swaps patched in now (committed or in parity)


def serving_kernels() -> frozenset[int]:
    """The serials of every swap patched in now: a CUDA graph captured under a subset of them runs only kernels
    still served (services.server.batch_decode keeps replaying it), one captured under another set may hold a
    kernel taken out since (never replayed again)."""
    return frozenset(_serving)


SAMPLES_KEPT = 8  # live inputs a committed swap keeps for the shadow check (services.server.shadow)
SAMPLE_BYTES = 64 << 20  # and at most this many bytes of them: a call larger than that is never kept
SAMPLE_EVERY = 64  # beyond the first call of each new size: one call in this many is kept
# After each commit, this many eager live calls of the swapped op are checked inline (YANTRA_SHADOW_CALLS).
SHADOW_CALLS: int = Settings.model_fields["shadow_calls"].default
# A swap keeps a copy of its modules' parameters and buffers to put back one a kernel wrote into, when they are
# this small in all (every norm of a model); a larger state (an MLP's weights) is only checksummed.
STATE_COPY_BYTES = 16 << 20


PLAIN_VALUES = (type(None), bool, int, float, str)  # what a recorded call may carry beside tensors


# Set by the engine around a forward that starts from an empty KV cache (a request's first prefill): its layers'
# calls attend only to their own tokens, so the shadow check can replay them with no cache at all.
_FIRST_FORWARD = contextvars.ContextVar("first_forward", default=False)


# Set while the server itself calls a committed kernel (a shadow replay, the reference of an inline check): those
# calls are not live traffic, so they are neither watched nor counted.
_UNWATCHED = contextvars.ContextVar("unwatched", default=False)


# Set around a CUDA graph's capture and the eager warm-up steps before it (services.server.batch_decode): calls there
# are the graph lane's, routed by the judge's GPU time (services.server.routing); every other call is the eager lane's.
_GRAPHED = contextvars.ContextVar("graphed", default=False)

# The serving plan of the swap being applied (`planned`), read by `apply_swap`: set from the service, around parity,
# so the canary checks the kernel where it will serve and graphs are captured holding it only where it serves.
_PLAN: contextvars.ContextVar[ServingPlan | None] = contextvars.ContextVar("plan", default=None)


@contextlib.contextmanager
def graph_lane() -> Iterator[None]:
    """Around a graph's warm-up and capture (engine thread): the calls inside are the graph lane's."""
    token = _GRAPHED.set(True)
    try:
        yield
    finally:
        _GRAPHED.reset(token)


@contextlib.contextmanager
def planned(plan: ServingPlan | None) -> Iterator[None]:
    """Swaps applied inside serve by `plan` (None: every call, as an unplanned swap does)."""
    token = _PLAN.set(plan)
    try:
        yield
    finally:
        _PLAN.reset(token)


@contextlib.contextmanager
def unwatched() -> Iterator[None]:
    token = _UNWATCHED.set(True)
    try:
        yield
    finally:
        _UNWATCHED.reset(token)


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


def _clone(value):
    """A deep copy of the tensors in a replayable value (tuples, lists and dicts rebuilt, plain values shared)."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (tuple, list)):
        return type(value)(_clone(v) for v in value)
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    return value


def tensor_leaves(value, path: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """(where, tensor) for every tensor in a value, in order: `[0]`, `[1][0]`, `['cos']`..."""
    if isinstance(value, torch.Tensor):
        yield path, value
    elif isinstance(value, (tuple, list)):
        for i, v in enumerate(value):
            yield from tensor_leaves(v, f"{path}[{i}]")
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from tensor_leaves(v, f"{path}[{k!r}]")


_BITS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bit patterns as integers, which can be summed (`_checksums`)."""
    if t.dtype == torch.bool:
        return t.to(torch.uint8)
    if (t.is_floating_point() or t.is_complex()) and t.element_size() in _BITS:
        return t.view(_BITS[t.element_size()])
    return t


@dataclass
class Watch:
    """One live call of a committed kernel under watch: its inputs as the caller passed them (`live_*`, the very
    tensors) and as they were before the kernel ran (`args`, `kwargs`: copies), in the form a replay takes (a KV
    cache left out, see `without_cache`)."""

    module: object
    args: tuple
    kwargs: dict
    live_args: tuple
    live_kwargs: dict
    inline: bool  # checked against the module's own forward now, before the caller gets the output
    keep: bool  # kept for the periodic shadow pass

    def pairs(self) -> Iterator[tuple[str, torch.Tensor, torch.Tensor]]:
        """(where, the caller's tensor, its copy from before the call)."""
        live = [*tensor_leaves(self.live_args, "args"), *tensor_leaves(self.live_kwargs, "kwargs")]
        kept = [*tensor_leaves(self.args, "args"), *tensor_leaves(self.kwargs, "kwargs")]
        for (where, t), (_, c) in zip(live, kept, strict=True):
            yield where, t, c

    def written(self) -> list[str]:
        """Where the kernel changed an input it was given (bit for bit); [] when it changed none."""
        return [where for where, t, c in self.pairs() if not same_bits(t, c)]

    def restore(self) -> None:
        """Put back every input the kernel changed: the caller's tensors hold what they held before the call."""
        for _, t, c in self.pairs():
            if not same_bits(t, c):
                with torch.inference_mode(t.is_inference()), torch.no_grad():
                    t.copy_(c)

    @property
    def nbytes(self) -> int:
        kept = [*tensor_leaves(self.args), *tensor_leaves(self.kwargs)]
        return sum(t.numel() * t.element_size() for _, t in kept)


def module_bytes(module) -> int:
    """The bytes of a module's parameters and persistent buffers: what a call of it reads beside its arguments."""
    return sum(t.numel() * t.element_size() for _, t in _state(module))


def _state(module) -> Iterator[tuple[str, torch.Tensor]]:
    """A module's parameters and persistent buffers, its children's included (non-persistent buffers, such as a
    dynamic RoPE's inv_freq, may legitimately change in its own forward)."""
    if not isinstance(module, torch.nn.Module):
        return
    for prefix, sub in module.named_modules():
        where = f"{prefix}." if prefix else ""
        for name, p in sub._parameters.items():
            if _summable(p):
                yield where + name, p
        for name, b in sub._buffers.items():
            if _summable(b) and name not in sub._non_persistent_buffers_set:
                yield where + name, b


_INTEGERS = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def _summable(t) -> bool:
    return (
        isinstance(t, torch.Tensor)
        and t.device.type != "meta"
        and (t.dtype in _INTEGERS or (t.is_floating_point() and t.element_size() in _BITS))
    )


def _checksums(tensors: list[torch.Tensor]) -> torch.Tensor | None:
    """One int64 per tensor: the sum of its bit patterns (a write into it changes it, but for a write that
    exactly cancels). A read of each tensor, no copy."""
    if not tensors:
        return None
    device = tensors[0].device
    with torch.no_grad():
        return torch.stack([_bits(t.detach()).sum(dtype=torch.int64).to(device) for t in tensors])


@dataclass
class SwapHandle:
    target: str
    serial: int = field(default_factory=lambda: next(_serials))  # unique in the process (serving_kernels)
    patched: list[_Patched] = field(default_factory=list)
    reverted: bool = False
    on_failure: Callable[[str], None] | None = None  # set at commit: a live error then falls back, reported here
    failure: str = ""  # the first error the kernel raised while serving; "" while it never has
    # Real inputs of live calls (module, args, kwargs), copied before the kernel ran: the shadow check replays them
    # against the module's own forward. The first call of each size (rows rounded up to a power of two) is always
    # kept, then one in SAMPLE_EVERY; at most SAMPLES_KEPT of them, SAMPLE_BYTES in all.
    samples: deque = field(default_factory=lambda: deque(maxlen=SAMPLES_KEPT))
    calls: int = 0
    sizes_seen: set = field(default_factory=set)
    shadow_calls: int = SHADOW_CALLS  # eager calls checked inline after the commit (the window)
    eager_calls: int = 0  # live calls since the commit a check could replay (not captured, no KV cache)
    inline_checks: int = 0  # live calls checked inline so far
    # id(module) -> (names, tensors, checksums, copies or None) of each patched module's parameters and persistent
    # buffers, taken when the kernel was patched in, before it ever ran (`fingerprint`)
    fingerprints: dict = field(default_factory=dict)
    clock: LiveClock | None = None  # set at commit: live calls timed against the judge's per-call limit
    state_bytes: dict = field(default_factory=dict)  # id(module) -> bytes of its parameters (a call reads them)
    kind: str = "module_class"  # the contract's kind: how a call's rows are read (routing.call_rows)
    # Where the kernel serves (services.server.routing), from the swap's verdict; None: every call. Set at apply, so
    # parity's canary and the graphs captured in the hold run what will serve.
    plan: ServingPlan | None = None
    own_calls: int = 0  # live calls the plan routed to the module's own forward (the kernel's lane or rows lose)
    _own: dict = field(default_factory=dict)  # id(module) -> its own forward (`own_forward`)

    def commit(
        self, on_failure: Callable[[str], None], shadow_calls: int | None = None, clock: LiveClock | None = None
    ) -> None:
        """The swap serves: errors fall back and are reported to `on_failure`; the next `shadow_calls` eager calls
        are checked inline; live calls are timed on `clock` (services.server.call_watch)."""
        if shadow_calls is not None:
            self.shadow_calls = shadow_calls
        self.clock = clock
        self.on_failure = on_failure

    def timing(self, module, args: tuple, kwargs: dict, watch: Watch | None):
        """The clock over this live call (services.server.call_watch says which calls are timed), or a null one."""
        first = next(tensor_leaves((args, kwargs)), None)
        if self.clock is None or first is None:
            return contextlib.nullcontext()
        device = first[1].device.type
        if device != "cpu" and (watch is None or not watch.inline):  # a launch returns before its kernel ends
            return contextlib.nullcontext()
        leaves = [t for _, t in tensor_leaves((args, kwargs))]  # only for a timed call: every GPU call passes here
        if id(module) not in self.state_bytes:
            self.state_bytes[id(module)] = module_bytes(module)
        moved = call_bytes([t.numel() * t.element_size() for t in leaves]) + self.state_bytes[id(module)]
        what = f"{call_watch.PREFIX}{self.target}"
        return self.clock.call(what, tuple(leaves[0].shape), moved, device, self.drifted)

    def watch(self, module, args: tuple, kwargs: dict) -> Watch | None:
        """Before a committed call runs: whether it is checked inline or kept (its inputs copied now), or None.

        Never in a CUDA graph being captured (a copy there would join the graph and run on every replay), nor a
        call whose replay would be another computation (a decode step's layer call carrying the KV cache)."""
        if _UNWATCHED.get():
            return None
        self.calls += 1
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            return None
        if not replayable(args) or not replayable(kwargs):
            plain = without_cache(args, kwargs)  # a decoder layer's call carries the request's KV cache
            if plain is None:
                return None
            args, kwargs = plain
        self.eager_calls += 1
        first = args[0] if args else next(iter(kwargs.values()), None)
        rows = first.numel() // max(1, first.shape[-1]) if isinstance(first, torch.Tensor) and first.dim() else 0
        size = next_pow2(rows)
        new = size not in self.sizes_seen  # a row count the judge may never have drawn: always checked
        inline = new or self.eager_calls <= self.shadow_calls
        keep = new or not self.calls % SAMPLE_EVERY
        if not (inline or keep):
            return None
        self.sizes_seen.add(size)
        return Watch(module, _clone(args), _clone(kwargs), args, kwargs, inline, keep)

    def keep(self, watch: Watch) -> None:
        """Keep a watched call's inputs for the periodic pass, the oldest dropped past SAMPLE_BYTES."""
        size = watch.nbytes
        if size > SAMPLE_BYTES:
            return
        held = lambda: sum(t.numel() * t.element_size() for s in self.samples for _, t in tensor_leaves(s[1:]))  # noqa: E731
        while self.samples and held() + size > SAMPLE_BYTES:
            self.samples.popleft()
        self.samples.append((watch.module, watch.args, watch.kwargs))

    def sample(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        """Keep this call's inputs if it is one the sampling keeps (the first of its size, then one in
        SAMPLE_EVERY); no inline check."""
        watch = self.watch(module, args, kwargs)
        if watch is not None and watch.keep:
            self.keep(watch)

    def fingerprint(self) -> None:
        """Checksums of every patched module's parameters and persistent buffers, taken before the kernel runs; and,
        where all of them together are small (norm weights: STATE_COPY_BYTES at most), a copy to put them back from."""
        states = {id(p.module): list(_state(p.module)) for p in self.patched}
        total = sum(t.numel() * t.element_size() for state in states.values() for _, t in state)
        for key, state in states.items():
            tensors = [t for _, t in state]
            copies = [t.detach().clone() for t in tensors] if total <= STATE_COPY_BYTES else None
            self.fingerprints[key] = ([name for name, _ in state], tensors, _checksums(tensors), copies)

    def weights_problem(self, modules=None) -> str:
        """Which parameters or buffers of `modules` (every patched one by default) no longer hold what they held when
        the kernel was patched in, put back where a copy was kept; "" when none changed."""
        changed, lost = [], False
        for module in self.modules if modules is None else modules:
            names, tensors, before, copies = self.fingerprints.get(id(module), ((), (), None, None))
            if before is None:
                continue
            now = _checksums(tensors)
            if torch.equal(now, before):
                continue
            for i in (now != before).nonzero().flatten().tolist():
                changed.append(names[i])
                if copies is None:
                    lost = True
                    continue
                with torch.no_grad():
                    tensors[i].copy_(copies[i])
        if not changed:
            return ""
        after = "; no copy was kept: reload the model" if lost else " (put back)"
        return f"the kernel wrote into module state {', '.join(sorted(set(changed))[:8])}{after}"

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
        own = self._own.get(id(module))  # looked up once per module: a routed call pays a dict read
        if own is None:
            own = self._own[id(module)] = self._find_own(module)
        return own

    def _find_own(self, module) -> Callable:
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
        _serving.discard(self.serial)


def serve(handle: SwapHandle, owner, call: Callable, args: tuple, kwargs: dict):
    """One live call of a swapped kernel (`call(owner, args, kwargs)`, the binder's). Before commit an error is
    parity's verdict; once committed it falls back to `owner`'s own code and reverts the swap. A committed call may
    be watched (`SwapHandle.watch`): checked inline against `owner`'s own code, which answers it instead when the
    kernel is off, or its inputs kept for the periodic shadow check. Where the swap's plan says the kernel is slower
    (services.server.routing: this lane, these rows), `owner`'s own code answers and nothing else runs: at a decode
    step that is a lane look-up and a row count's compare, and inside a graph only its capture pays it."""
    plan = handle.plan
    if plan is not None and not plan.everywhere and not _UNWATCHED.get():  # the shadow check replays the kernel
        lane = plan.graph if _GRAPHED.get() else plan.eager  # on inputs it served, whatever lane it served them in
        if not lane.everywhere and (lane.nowhere or not lane.serves(call_rows(handle.kind, args, kwargs))):
            handle.own_calls += 1
            return handle.own_forward(owner)(*args, **kwargs)
    if handle.on_failure is None:
        return call(owner, args, kwargs)
    watch = handle.watch(owner, args, kwargs)
    try:
        with handle.timing(owner, args, kwargs, watch) as timed:
            out = call(owner, args, kwargs)
            if timed is not None and torch.cuda.is_available():  # a watched GPU call: its kernels, not the launch
                torch.cuda.synchronize()
    except Exception as exc:
        if watch is not None:  # whatever the kernel wrote before raising is put back: the fallback runs on what was
            watch.restore()
            handle.weights_problem([owner])
        return handle.fall_back(owner, exc, args, kwargs)
    if watch is not None and (watch.inline or watch.written()):  # a kept call's copy is there: one read to compare
        from services.server.shadow import check_inline  # shadow imports parity, which imports this module

        out = check_inline(handle, watch, out)
    elif watch is not None:
        handle.keep(watch)
    if timed is not None and timed.late:  # the answer stands (checked above where watched); the kernel goes
        handle.drifted(timed.late)
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
    handle = SwapHandle(contract.target, kind=kind, plan=_PLAN.get())
    fn = kernel_forward(entry, contract, handle)
    try:
        for module in instances:
            handle.patched.append(_Patched(module, module.__dict__.get("forward", _MISSING)))
            module.__dict__["forward"] = types.MethodType(fn, module)
        handle.fingerprint()
    except BaseException:
        handle.revert()
        raise
    _serving.add(handle.serial)
    return handle


def _apply_function(contract: pb.Contract, entry: Callable) -> SwapHandle:
    """Replace the module global `contract.target` with the kernel (through the one binder the judge uses); once
    committed, an error falls back to the function it replaced."""
    site = site_of(contract.target)
    if site is None:
        raise SwapRefused(f"no function {contract.target} to swap in the served model's modules")
    handle = SwapHandle(contract.target, kind="function", plan=_PLAN.get())
    call = bind(contract, entry)

    def swapped(*args, **kwargs):
        return serve(handle, site, call, args, kwargs)

    setattr(swapped, KERNEL_MARK, True)
    # its signature is the function's (services.server.functions.function_params), a hub-kernel module's too
    swapped.__wrapped__ = plain_function(site.current) or site.current
    swapped.__name__ = f"kernel_function[{getattr(entry, '__name__', 'entry')}]"
    handle.patched.append(_Patched(site, site.current))
    site.set(swapped)
    _serving.add(handle.serial)
    return handle


def is_patched(module: torch.nn.Module) -> bool:
    return "forward" in module.__dict__
