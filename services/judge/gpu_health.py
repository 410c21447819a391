"""The GPU health probe, run in the judge's own process after every sandbox child on a GPU.

A candidate that faults the device (an illegal address, a hung kernel) kills only its child's
context, but a wedged GPU would make every later verdict wrong: so a tiny CUDA op must still
give the right answer, within a time limit, before the judge believes anything more.
"""

from __future__ import annotations

import asyncio

PROBE_TIMEOUT_S = 60.0


def probe_sync() -> str:
    """'ok' or 'failed: ...' for a tiny op on the current CUDA device (blocking)."""
    import torch

    try:
        x = torch.arange(1024, device="cuda", dtype=torch.float32)
        total = float((x * 2).sum())
        torch.cuda.synchronize()
    except Exception as exc:  # any CUDA error is the answer, not a crash of the judge
        return f"failed: {type(exc).__name__}: {exc}"
    expected = float(1023 * 1024)
    return "ok" if total == expected else f"failed: 2*sum(0..1023) came back {total}, not {expected}"


async def probe(timeout_s: float = PROBE_TIMEOUT_S) -> str:
    try:
        return await asyncio.wait_for(asyncio.to_thread(probe_sync), timeout=timeout_s)
    except TimeoutError:
        return f"failed: the probe did not finish within {timeout_s:g} s"
