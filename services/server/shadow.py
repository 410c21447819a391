"""The shadow check: committed kernels replayed on real inputs they served, against the module's own forward.

Parity before a commit runs on a short canary; live traffic brings inputs the canary never had (long
prompts, other batch sizes). Every committed swap keeps a few of the inputs it really served
(`hotswap.SwapHandle.sample`: the first call of each size, then one in 64); this replays them,
periodically and on the engine thread, with the recorded-call check parity uses. A kernel found off
the module's own forward is taken out at once and the server records a RollbackRequested saying why.
It holds once decode runs in CUDA graphs too, where a wrong kernel cannot raise.
"""

from __future__ import annotations

import logging

import torch

from services.server.parity import RecordedCall, replay_calls

SHADOW_EVERY_S = 30.0
log = logging.getLogger(__name__)
PREFIX = "the shadow check found the kernel off the module's own forward"


def check_swap(handle) -> str:
    """Why the swap's kept live inputs show its kernel wrong; "" when they agree (or there were none)."""
    samples = list(handle.samples)
    handle.samples.clear()
    calls = []
    with torch.inference_mode():
        for module, args, kwargs in samples:
            try:
                calls.append(RecordedCall(module, args, kwargs, handle.own_forward(module)(*args, **kwargs)))
            except Exception as exc:  # the module's own forward refuses it: it says nothing about the kernel
                log.warning("shadow check: a kept input the module's own forward cannot replay, skipped (%s)", exc)
    try:
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
