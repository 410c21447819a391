"""Parity of a swap on the LIVE model: real recorded activations, then a logits canary.

Runs on the engine thread inside `Engine.exclusive`, so no request sees a half-checked kernel. Before it, outside
any long hold, the server sweeps the vocabulary through the candidate (services.server.vocab_sweep): every token's
own rows, alone (at a drawn position where a lone token's states allow), which no recorded call or canary holds.
  1. hooks on the matching instances record their real calls during a canary request (inputs cloned,
     original outputs cloned); the canary's greedy tokens and logits are kept. Nothing is patched yet, so the
     server records this in a hold of its own (`record_before`), serving requests between it and the patch; the
     patch's hold records it again only when a swap changed the model meanwhile;
  2. the kernel is patched in; each patched instance is called on its recorded inputs and compared with
     its original output through the shared tolerance table; the inputs must come back unmodified;
  3. the canary runs again, teacher-forced along the first run's tokens, so logits are compared over
     the same prefixes; the argmax at each step is the "after" token;
  4. the canary runs once more on the lane requests are served on (the batched slot cache, each step a
     CUDA graph on a GPU): the graphs are captured again with the kernel in them, and what they compute
     is compared with the eager logits of step 1 — what is checked is what will serve.
Any exception, NaN or miss reverts the patch before returning.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from services.core.kernels import bind
from services.core.pb import events_pb2 as pb
from services.core.tolerances import tolerance, within
from services.ops import rewrites_layer
from services.server.engine import Engine
from services.server.functions import FunctionSite, model_functions, site_of, wrapped
from services.server.hotswap import KERNEL_MARK, PLAIN_VALUES, SwapHandle, SwapRefused, is_patched, serving_kernels
from services.server.introspection import class_path, instances_of

CANARY_TOKENS = 8
CALLS_PER_INSTANCE = 4  # prefill and a few decode steps: the live shapes, without hoarding memory

# Canary logit tolerance, relative to the canary's logit scale (max |logit|, at least 1).
# float32: a correct kernel differs from eager only in summation order (~1e-6 relative per op), so
#   1e-3 of the scale leaves ~1000x headroom while a forgotten 1+0.1·N(0,1) norm weight moves logits
#   by several percent; the greedy tokens must also be equal.
# bf16: one bf16 step is 2^-8 ≈ 0.4 %; a kernel that rounds differently from eager in every norm of a
#   28-layer model shifts logits by a few steps of the scale, so 5 % (~13 steps) accepts honest
#   rounding and still rejects a wrong kernel; greedy ties may flip, so tokens are recorded, not required.
CANARY_RTOL: dict[torch.dtype, float] = {torch.float32: 1e-3, torch.float16: 2e-2, torch.bfloat16: 5e-2}


def logit_max_diff(logits: list[torch.Tensor], reference: list[torch.Tensor]) -> float:
    """The largest |logit − reference| over a canary's steps; inf when any logit is not finite (or none ran)."""
    if not logits or not all(torch.isfinite(a).all() for a in logits):
        return float("inf")
    return max(float((a - b).abs().max()) for a, b in zip(logits, reference, strict=True))


def canary_tolerance(dtype: torch.dtype, logits: list[torch.Tensor]) -> float:
    scale = max([1.0] + [float(t.abs().max()) for t in logits if t.numel()])
    return CANARY_RTOL.get(dtype, 1e-3) * scale


@dataclass
class RecordedCall:
    module: torch.nn.Module
    args: tuple
    kwargs: dict
    output: object


def clone_values(value):
    """A deep copy of tensors inside tuples/lists/dicts; other objects cannot be replayed faithfully."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, PLAIN_VALUES):
        return value
    if isinstance(value, (tuple, list)):
        return type(value)(clone_values(v) for v in value)
    if isinstance(value, dict):
        return {k: clone_values(v) for k, v in value.items()}
    raise TypeError(f"parity cannot replay a call carrying a {type(value).__name__}")


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def tensors_in(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in tensors_in(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors_in(v)]
    return []


def record_calls(engine: Engine, modules: list[torch.nn.Module], ids: list[int], max_new: int):
    """Run the canary with hooks on `modules`: (recorded calls, canary tokens, canary logits)."""
    calls: list[RecordedCall] = []
    counts: dict[int, int] = {}
    problems: list[str] = []

    def hook(module, args, kwargs, output):
        if counts.get(id(module), 0) >= CALLS_PER_INSTANCE:
            return
        try:
            calls.append(RecordedCall(module, clone_values(args), clone_values(kwargs), clone_values(output)))
        except TypeError as exc:  # a call carrying a cache object: not replayable, not kept
            problems.append(str(exc))
            return
        counts[id(module)] = counts.get(id(module), 0) + 1

    handles = [m.register_forward_hook(hook, with_kwargs=True) for m in modules]
    try:
        tokens, logits = engine.decode(ids, max_new, keep_logits=True)
        if any(id(m) not in counts for m in modules):  # a decoder layer's decode calls carry the KV cache
            engine.forward_without_cache(ids)
    finally:
        for h in handles:
            h.remove()
    if problems and not calls:
        raise TypeError(problems[0])
    return calls, tokens, logits


def record_function_calls(engine: Engine, site: FunctionSite, ids: list[int], max_new: int, limit: int):
    """Run the canary with `site`'s function recorded: (its first `limit` calls, canary tokens, canary logits)."""
    calls: list[RecordedCall] = []

    def hook(called, args, kwargs, out):
        if len(calls) < limit:
            with contextlib.suppress(TypeError):  # a call parity cannot replay: not kept
                calls.append(RecordedCall(called, clone_values(args), clone_values(kwargs), clone_values(out)))

    with wrapped(site, call_recorder(site, hook)):
        tokens, logits = engine.decode(ids, max_new, keep_logits=True)
    return calls, tokens, logits


def record_live_inputs(engine: Engine, ids: list[int], max_new: int) -> dict[str, list[RecordedCall]]:
    """Real calls of every leaf module class during one request (their inputs and eager outputs, cloned): the
    first call of each input shape per class, up to CALLS_PER_INSTANCE. Taken when a profile is captured,
    so parity later replays a target's kernel on inputs the model really fed it, prefill and decode alike."""
    recorded: dict[str, list[RecordedCall]] = {}
    shapes: dict[str, set] = {}

    def hook(module, args, kwargs, output):
        if isinstance(module, FunctionSite):
            name = module.target
        elif is_patched(module):  # a kernel answered: its output is no reference for the next candidate
            return
        else:
            name = class_path(module)
        key = tuple(tuple(a.shape) for a in tensors_in(args))
        if key in shapes.setdefault(name, set()) or len(recorded.get(name, [])) >= CALLS_PER_INSTANCE:
            return
        try:
            call = RecordedCall(module, clone_values(args), clone_values(kwargs), clone_values(output))
        except TypeError:
            return  # a call parity cannot replay (a cache object among its arguments): not kept
        shapes[name].add(key)
        recorded.setdefault(name, []).append(call)

    # leaves, and the layers a family rewrites whole (a gated MLP keeps its projections inside its new forward, a
    # decoder layer its attention and MLP)
    leaves = [m for m in engine.model.modules() if not list(m.children()) or rewrites_layer(m)]
    handles = [m.register_forward_hook(hook, with_kwargs=True) for m in leaves]
    try:
        with contextlib.ExitStack() as stack:  # and the functions a family swaps (a modeling file's RoPE)
            for target in model_functions(engine.model):
                site = site_of(target)
                if site is not None:
                    stack.enter_context(wrapped(site, call_recorder(site, hook)))
            engine.decode(ids, max_new)
            engine.forward_without_cache(ids)  # a decoder layer's calls, replayable without the KV cache
    finally:
        for h in handles:
            h.remove()
    return recorded


def call_recorder(site: FunctionSite, hook: Callable) -> Callable:
    """A wrapper factory for `functions.wrapped`: each call of the function reported to `hook` as a module's is."""

    def around(original):
        def record(*args, **kwargs):
            out = original(*args, **kwargs)
            if not getattr(original, KERNEL_MARK, False):  # a kernel answered: no reference
                hook(site, args, kwargs, out)
            return out

        return record

    return around


def replay_calls(calls: list[RecordedCall]) -> tuple[int, int, float]:
    """(checked, passed, max abs error) of the patched modules on their recorded live inputs."""
    checked = passed = 0
    max_abs = 0.0
    with torch.inference_mode():
        for call in calls:
            args, kwargs = clone_values(call.args), clone_values(call.kwargs)
            out = call.module(*args, **kwargs)
            if not (_same(args, call.args) and _same(kwargs, call.kwargs)):
                raise RuntimeError(f"the kernel modified its input in place on {type(call.module).__name__}")
            got, ref = tensors_in(out), tensors_in(call.output)
            ok = len(got) == len(ref) > 0
            for g, r in zip(got, ref, strict=False):
                close, abs_err, _rel = within(g, r)
                ok = ok and close
                max_abs = max(max_abs, abs_err)
            checked += 1
            passed += ok
    return checked, passed, max_abs


def warm_kernel(engine: Engine, contract: pb.Contract, entry: Callable) -> int:
    """Run the candidate on the real inputs of the last profile before the swap takes the model, so Triton
    compiles its kernels for the live shapes (and the integer specialisations of their row counts) outside the
    hold: a first compile took the 1.5B swap's hold from 0.6 s to 2.7 s on the H200. Runs on a worker thread
    beside the serving engine (graphs are captured thread-locally); its outputs are dropped and its errors
    left for parity to find. Returns how many calls ran. A CPU has nothing to compile (the interpreter)."""
    if not engine.cuda:
        return 0
    call, ran = bind(contract, entry), 0
    with torch.inference_mode():
        for recorded in engine.live_inputs.get(contract.target, []):
            try:
                call(recorded.module, clone_values(recorded.args), clone_values(recorded.kwargs))
                ran += 1
            except Exception:
                return ran
        torch.cuda.synchronize()
    return ran


def served_canary(
    engine: Engine, ids: list[int], forced: list[int], reference: list[torch.Tensor], observed: pb.ParityObservation
) -> None:
    """Step 4: the canary on the served lane, graphs captured again first (their count and the logits recorded)."""
    decoder = engine.decoder
    if decoder is None or not engine.batched(ids, len(forced)) or decoder.free_slot() is None:
        return
    observed.served_lane = "graphs" if decoder.graphs else "eager steps"
    observed.graphs_captured = decoder.refresh()
    before = decoder.captures
    with decoder.fresh():  # each step in a graph holding the kernel: captured now where none does yet
        _, logits = engine.serve_decode(ids, len(forced), forced=forced, keep_logits=True)
    observed.graphs_captured += decoder.captures - before
    observed.served_logit_max_diff = logit_max_diff(logits, reference)


@dataclass
class Before:
    """Step 1's record: the target's live calls, the canary's tokens and logits, under the swaps serving then."""

    calls: list[RecordedCall]
    tokens: list[int]
    logits: list[torch.Tensor]
    kernels: frozenset[int]  # hotswap.serving_kernels() when recorded: another set means the model changed since


def record_before(engine: Engine, contract: pb.Contract, canary_ids: list[int]) -> Before:
    """Step 1, on the engine thread: the canary with the target's calls recorded, nothing patched (SwapRefused when
    the model has nothing of the target; TypeError when a call cannot be recorded)."""
    if contract.kind == "function":
        site = site_of(contract.target)
        if site is None:
            raise SwapRefused(f"no function {contract.target} to swap in the served model's modules")
        record = record_function_calls(engine, site, canary_ids, CANARY_TOKENS, 4 * CALLS_PER_INSTANCE)
    else:
        record = record_calls(engine, instances_of(engine.model, contract.target), canary_ids, CANARY_TOKENS)
    return Before(*record, kernels=serving_kernels())


@contextlib.contextmanager
def hold_part(observed: pb.ParityObservation, name: str) -> Iterator[None]:
    """Times one part of a swap's hold into observed.hold_parts (what a request arriving then waits behind)."""
    started = time.perf_counter()
    try:
        yield
    finally:
        observed.hold_parts.append(pb.HoldPart(name=name, seconds=time.perf_counter() - started))


def swap_with_parity(
    engine: Engine,
    contract: pb.Contract,
    entry: Callable,
    canary_ids: list[int],
    observed: pb.ParityObservation,
    before: Before | None = None,
) -> SwapHandle | None:
    """Patch the kernel in and fill `observed`; returns the live handle, or None when nothing stays patched.
    `before`: step 1 recorded earlier (`record_before`, a hold of its own), recorded again here when another swap
    has changed the model since.

    The caller decides commit or reject from `observed` and reverts the handle on reject.
    """
    observed.dtype = engine.dtype
    observed.tolerance = tolerance(engine.loaded.dtype)[0]
    try:
        if before is None or before.kernels != serving_kernels():
            with hold_part(observed, "record"):
                before = record_before(engine, contract, canary_ids)
        with hold_part(observed, "apply"):
            handle = engine.apply(contract, entry)
    except (SwapRefused, TypeError) as exc:
        observed.error = str(exc)
        return None
    observed.modules_matched = len(handle.patched)
    observed.canary_tokens_before.extend(before.tokens)
    observed.canary_logit_tolerance = canary_tolerance(engine.loaded.dtype, before.logits)
    live = [c for c in engine.live_inputs.get(contract.target, []) if c.module in handle.modules]
    observed.profile_inputs_checked = len(live)
    try:
        with hold_part(observed, "replay"):
            checked, passed, max_abs = replay_calls(before.calls + live)
        observed.activations_checked, observed.activations_passed = checked, passed
        observed.max_abs_err = max_abs
        with hold_part(observed, "canary"):
            after, after_logits = engine.decode(canary_ids, CANARY_TOKENS, forced=before.tokens, keep_logits=True)
        observed.canary_tokens_after.extend(after)
        observed.canary_logit_max_diff = logit_max_diff(after_logits, before.logits)
        with hold_part(observed, "served_canary"):
            served_canary(engine, canary_ids, before.tokens, before.logits, observed)
    except Exception as exc:  # a kernel that crashes on live inputs is a rejection, never a crashed server
        engine.revert(handle)
        observed.error = f"parity failed: {type(exc).__name__}: {exc}"
        return None
    return handle
