"""The five services and the re-derivers that make a run's log replayable."""

from __future__ import annotations

import importlib

from services.core.replay import Rederive

SERVICES = ("server", "profiler", "skillstore", "coder", "judge")


def rederivers() -> dict[str, Rederive]:
    from services.core import run_end

    merged: dict[str, Rederive] = dict(run_end.REDERIVE)  # RunFailed: any service may write it
    for name in SERVICES:
        domain = importlib.import_module(f"services.{name}.domain")
        merged.update(domain.REDERIVE)
    return merged
