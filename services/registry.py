"""The five services and the re-derivers that make a run's log replayable."""

from __future__ import annotations

import importlib

from services.core.replay import Rederive

SERVICES = ("server", "profiler", "skillstore", "coder", "judge")


def rederivers() -> dict[str, Rederive]:
    merged: dict[str, Rederive] = {}
    for name in SERVICES:
        domain = importlib.import_module(f"services.{name}.domain")
        merged.update(domain.REDERIVE)
    return merged
