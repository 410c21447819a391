"""Tamper detection inside the sandbox child: did the candidate patch what the judge measures with?

The static check refuses assignments to torch, triton, time and friends; this is the second
wall, for whatever gets past it. Before the candidate is imported the child records the identity
of every function the judge relies on (timers, events, synchronisation, do_bench, the tolerance
check, the oracle's forward, torch.Tensor's methods, torch's functions); afterwards any that
changed is named and the candidate fails.
"""

from __future__ import annotations

import builtins
import math
import time
from collections.abc import Iterable

Snapshot = dict[str, int]


def _members(prefix: str, obj: object) -> Iterable[tuple[str, object]]:
    try:
        items = list(vars(obj).items())
    except TypeError:
        return []
    # Functions, classes and descriptors only: data (flags, counters) legitimately changes as torch runs.
    keep = (property, staticmethod, classmethod)
    return ((f"{prefix}.{name}", v) for name, v in items if callable(v) or isinstance(v, keep))


def watched(oracle_class: type | None = None, *, gpu: bool = False) -> list[tuple[str, object]]:
    """(name, namespace) pairs whose members are snapshotted: modules and classes."""
    import torch

    from services.core import kernels, tolerances
    from services.judge import run_cases
    from services.ops import FAMILIES

    out: list[tuple[str, object]] = [
        ("time", time),
        ("math", math),
        ("builtins", builtins),
        ("torch", torch),
        ("torch.Tensor", torch.Tensor),
        ("torch.nn.Module", torch.nn.Module),
        ("torch.cuda", torch.cuda),
        ("tolerances", tolerances),
        ("kernels", kernels),
        ("run_cases", run_cases),
        *FAMILIES.items(),  # every op family's module: the wrappers the candidates run behind
    ]
    if oracle_class is not None:  # the live class, or a function target's module
        out.append((getattr(oracle_class, "__qualname__", oracle_class.__name__), oracle_class))
    if gpu:
        import triton.testing

        from services.judge import timing

        out += [
            ("torch.cuda.Event", torch.cuda.Event),
            ("torch.cuda.Stream", torch.cuda.Stream),
            ("torch.cuda.CUDAGraph", torch.cuda.CUDAGraph),
            ("triton.testing", triton.testing),
            ("timing", timing),
        ]
    return out


def snapshot(namespaces: list[tuple[str, object]]) -> Snapshot:
    snap: Snapshot = {}
    for prefix, obj in namespaces:
        for name, value in _members(prefix, obj):
            snap[name] = id(value)
    snap["tolerances.TOLERANCES#items"] = hash(tuple(sorted((str(k), v) for k, v in _tolerance_items())))
    return snap


def _tolerance_items():
    from services.core import tolerances

    return tolerances.TOLERANCES.items()


def changed(before: Snapshot, namespaces: list[tuple[str, object]]) -> list[str]:
    """Names whose object is no longer the one recorded (replaced or deleted); new names are fine."""
    now = snapshot(namespaces)
    return sorted(name for name, ident in before.items() if now.get(name) != ident)
