"""The shadow check: committed kernels held against the module's own forward on the real inputs they serve.

Parity before a commit runs on a short canary; live traffic brings inputs the canary never had (long
prompts, other batch sizes). The server is the last line of the judge, in two parts:

Inline, on the live call (`check_inline`, from `hotswap.serve`). For a while after each commit — the first
YANTRA_SHADOW_CALLS eager calls of the swapped op (256 by default; `hotswap.SwapHandle.watch`) — and from then
on for every call whose size (rows, rounded up to a power of two) the swap has not served yet, the call's
inputs are copied before the kernel runs. After it: the inputs must be bit for bit what they were (a kernel that
writes into its input, a residual stream doubled, say), the module's parameters and persistent buffers must
hold what they held when the kernel was patched in (a checksum of each, taken at the patch), and the output the
caller is about to get must match the module's own forward on the copy, within the tolerance parity uses. Any
difference answers THIS call with the module's own forward, reverts every instance at once
(`SwapHandle.drifted`) and records why — the shape, the max abs error, "wrote its input hidden_states" — which
the server turns into a RollbackRequested. The inputs the kernel changed are put back first, and so is module
state it changed where the swap kept a copy of it (STATE_COPY_BYTES: every norm weight of a model; an MLP's
weights are only checksummed, and a kernel that wrote them leaves them written: the reason says so).

Periodic, on kept samples (`shadow_pass`, every SHADOW_EVERY_S on the engine thread). Past the window, the first
call of each new size and one call in SAMPLE_EVERY are kept (copied before the kernel ran, so a kept call's
inputs are compared after it too; SAMPLES_KEPT of them, SAMPLE_BYTES at most) and replayed here with the
recorded-call check parity uses; the module state's checksums are compared again, which covers writes into it
from calls no inline check saw (graph replays included). Replays and references run `unwatched`: the server's
own calls are not traffic.

CUDA graphs. A decode step replayed from a graph runs no Python: it cannot be watched, and a copy taken while a
graph is captured would join the graph and run on every replay, so calls inside a capture are never watched.
They need no cover of their own during the window: every graph is preceded by eager warm-up steps of its very
shape, on live slot state (batch_decode.WARMUP_STEPS), which are live calls like any other — the first of each
bucket's row count is a new size, so it is checked inline whatever the window, and a kernel found wrong there is
reverted before the capture that follows it, which then holds the module's own forward. A replay runs the
launches that warm-up checked, on the same shapes; what no inline check sees is a kernel wrong only for some
values at a shape already checked, which the judge's drawn cases and the periodic pass (on eager calls: prefill,
the solo lane, graphs off) are for. Shadowing each replay would mean an eager forward beside every decode step,
doubling its cost.

What a check costs: an inline check runs the module's own forward once more on a copy of the call's inputs and
reads its parameters once (in the window and on new sizes only); nothing is held after the call. A layer called
with a KV cache is checked only where the call started from an empty cache (a prefill: the same computation
without the cache); a decode step's call attends to what the cache holds and is never checked.
"""

from __future__ import annotations

import inspect
import logging

import torch

from services.core.tolerances import tolerance, within
from services.server.hotswap import tensor_leaves, unwatched
from services.server.parity import RecordedCall, replay_calls

SHADOW_EVERY_S = 30.0
log = logging.getLogger(__name__)
PREFIX = "the shadow check found the kernel off the module's own forward"


def check_swap(handle) -> str:
    """Why the swap's kept live inputs show its kernel wrong; "" when they agree (or there were none)."""
    problem = handle.weights_problem()
    if problem:
        return f"{PREFIX}: {problem}"
    samples = list(handle.samples)
    handle.samples.clear()
    calls = []
    with torch.inference_mode(), unwatched():
        for module, args, kwargs in samples:
            try:
                calls.append(RecordedCall(module, args, kwargs, handle.own_forward(module)(*args, **kwargs)))
            except Exception as exc:  # the module's own forward refuses it: it says nothing about the kernel
                log.warning("shadow check: a kept input the module's own forward cannot replay, skipped (%s)", exc)
    try:
        with unwatched():  # the replays are the server's own calls, not traffic
            checked, passed, max_abs = replay_calls(calls)
    except Exception as exc:  # the kernel wrote its input, or failed on an input its module's forward takes
        return f"{PREFIX}: {type(exc).__name__}: {exc}"
    if passed < checked:
        shapes = sorted({tuple(c.args[0].shape) for c in calls if c.args and hasattr(c.args[0], "shape")})
        return f"{PREFIX} on {checked - passed} of {checked} live inputs (shapes {shapes}; max abs err {max_abs:.3g})"
    return ""


def shadow_pass(engine, swaps) -> list[str]:
    """Check every swap serving now (engine thread, model held); returns the problems found, each already acted on."""
    problems = []
    for entry in swaps.serving_entries():
        problem = check_swap(entry.handle)
        if problem:
            entry.handle.drifted(problem)
            problems.append(f"{entry.swap_id}: {problem}")
    return problems


# ---------------------------------------------------------------------------------------------- inline


def output_problem(got, ref) -> str:
    """How the output a kernel answered differs from the module's own (parity's tolerance); "" when it does not."""
    got_t, ref_t = [t for _, t in tensor_leaves(got)], [t for _, t in tensor_leaves(ref)]
    if len(got_t) != len(ref_t):
        return f"it answered {len(got_t)} tensors where the module's own forward answers {len(ref_t)}"
    worst, failed = 0.0, None
    for i, (g, r) in enumerate(zip(got_t, ref_t, strict=True)):
        if g.shape != r.shape:
            return f"output {i} has shape {tuple(g.shape)} where the module's own forward gives {tuple(r.shape)}"
        close, abs_err, _rel = within(g, r)
        if not close and failed is None:
            failed = r
        worst = max(worst, abs_err)
    if failed is None:
        return ""
    atol, rtol = tolerance(failed.dtype)
    dtype = str(failed.dtype).removeprefix("torch.")
    return f"max abs err {worst:.3g} over the tolerance ({dtype}: atol {atol:g}, rtol {rtol:g})"


def _named(handle, module, where: str) -> str:
    """`args[0]...` as the forward names it: `hidden_states`, `position_embeddings[1]`."""
    kind, _, rest = where.partition("[")
    if kind == "kwargs":
        key, _, tail = rest.partition("]")
        return key.strip("'") + tail
    try:
        params = list(inspect.signature(handle.own_forward(module)).parameters)
        index, _, tail = rest.partition("]")
        return params[int(index)] + tail
    except (ValueError, TypeError, IndexError):
        return where


def _shapes(watch) -> list[tuple[int, ...]]:
    return [tuple(t.shape) for _, t in tensor_leaves(watch.args)]


def check_inline(handle, watch, out):
    """A watched live call the kernel answered with `out`: the answer the caller gets. `out` when the kernel's
    call matches the module's own forward on the inputs as they were before it; else the module's own answer,
    with the inputs the kernel changed put back and the swap reverted (`handle.drifted`), why recorded."""
    handle.inline_checks += 1
    module = watch.module
    with torch.no_grad():
        written = watch.written()
        if written:
            watch.restore()
        problem = ""
        if written:
            names = ", ".join(_named(handle, module, w) for w in written)
            problem = f"the kernel wrote its input {names}"
        problem = problem or handle.weights_problem([module])
        try:
            with unwatched():
                ref = handle.own_forward(module)(*watch.args, **watch.kwargs)
        except Exception as exc:  # the module's own forward refuses the input too: it says nothing of the kernel
            log.warning("inline shadow check: the module's own forward cannot run a live input, skipped (%s)", exc)
            if problem:  # but what the kernel wrote does
                handle.drifted(f"{PREFIX} on a live call of {handle.target} (inputs {_shapes(watch)}): {problem}")
            return out
        problem = problem or output_problem(out, ref)
    if not problem:
        if watch.keep:
            handle.keep(watch)
        return out
    handle.drifted(f"{PREFIX} on a live call of {handle.target} (inputs {_shapes(watch)}): {problem}")
    return ref
