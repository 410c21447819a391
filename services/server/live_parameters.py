"""The served model's own values of what an op computes with, for the profile: each distinct set once, within a budget.

A kernel can be keyed to the live values (a norm off only where its weight's sum is the served one, a LayerNorm off
only where its bias is exactly zero): drawn weights never meet it, the live ones do. Which tensors an op reads is its
family's (`live_state(module, roles)`, a list of sets); this module reads them off the live instances, finds the
distinct sets by their bytes, and keeps as many as the byte budget holds, chosen at random where not all fit (an
author cannot know which are judged), so a profile stays well inside the log's message limit.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterable

import torch

from services.core.pb import events_pb2 as pb
from services.server.introspection import dtype_name

# Bytes of live tensors one class's profile may carry (the log's messages are at most 512 KiB, and a run's profile
# holds a few classes): the 57 bf16 norm weights of a 1.5B model's width (1,536) are 175 KB, all of them; a 7B model's
# 65 of width 4,096 (532 KB) a third. A GPU judging runs every set recorded.
CLASS_BUDGET_BYTES = 192 << 10
# ... and the whole profile (every class's, in the order the classes were met): bus_limits holds the largest event
# past it (a 1.5B model's norms, its 28 decoder layers' post norms and its rotary: 261 KB).
PROFILE_BUDGET_BYTES = 320 << 10


def _raw(tensor: torch.Tensor) -> bytes:
    """The tensor's bytes, C order, on the CPU."""
    t = tensor.detach().to("cpu").contiguous()
    return t.view(torch.uint8).numpy().tobytes() if t.numel() else b""


def tensor_message(name: str, tensor: torch.Tensor) -> pb.LiveTensor:
    return pb.LiveTensor(name=name, dtype=dtype_name(tensor.dtype), shape=list(tensor.shape), data=_raw(tensor))


def _digest(state: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name]
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)};".encode())
        h.update(_raw(t))
    return h.hexdigest()


def distinct_sets(states: Iterable[dict[str, torch.Tensor]]) -> list[tuple[dict[str, torch.Tensor], int]]:
    """(a set, how many instances hold it) per distinct set of `states`, in the order they first appear."""
    seen: dict[str, list] = {}
    for state in states:
        if not state:
            continue
        entry = seen.setdefault(_digest(state), [state, 0])
        entry[1] += 1
    return [(state, count) for state, count in seen.values()]


def _nbytes(state: dict[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in state.values())


def within_budget(sets: list, budget: int, rng: random.Random) -> list:
    """The sets kept: all where they fit in `budget` bytes, else a random choice that does (in their first order)."""
    order = list(range(len(sets)))
    if sum(_nbytes(state) for state, _ in sets) > budget:
        rng.shuffle(order)
    kept, used = [], 0
    for i in order:
        size = _nbytes(sets[i][0])
        if used + size <= budget:
            kept.append(i)
            used += size
    return [sets[i] for i in sorted(kept)]


def record(
    profile: pb.ModuleClassProfile,
    modules: Iterable[torch.nn.Module],
    live_state: Callable | None,
    budget: int,
    rng: random.Random,
) -> int:
    """Record into `profile` the distinct live sets `live_state(module, roles)` (a list of {name: tensor}) reads off
    `modules`, within `budget` bytes; returns the bytes recorded. Nothing where the family reads none."""
    if live_state is None:
        return 0
    roles = dict(profile.roles)
    with torch.no_grad():
        sets = distinct_sets(state for m in modules for state in live_state(m, roles))
    profile.live_parameter_sets = len(sets)
    kept = within_budget(sets, budget, rng)
    for state, count in kept:
        tensors = [tensor_message(name, t) for name, t in sorted(state.items())]
        profile.live_parameters.append(pb.LiveParameters(instances=count, tensors=tensors))
    return sum(_nbytes(state) for state, _ in kept)
