"""The reward, recomputed in the judge's own process from measured numbers (pure).

Ladder: -1 rejected or wrong; +1 correct but untimed or not > 5% faster than eager; +2 > 5%
faster than eager (geometric mean over shapes); +3 also > 5% faster than the best baseline
(per shape the fastest of eager, torch.compile and the native fused op).
"""

from __future__ import annotations

import math

from services.core.pb import events_pb2 as pb
from services.judge.static_check import first_finding

FASTER = 1.05  # "faster" means more than 5% faster: below that is measurement noise
SUSPICIOUS = 10.0  # a speedup this large on a memory-bound op deserves a second look
UNTIMED_CPU = "no GPU: correctness only under TRITON_INTERPRET=1; reward capped at +1"


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else 0.0


def speedups(timing: pb.TimingEvidence) -> tuple[float, float]:
    """(geometric-mean speedup over eager, over the best baseline) across rows that were measured."""
    vs_eager, vs_best = [], []
    for row in timing.rows:
        if row.candidate_us <= 0 or row.eager_us <= 0:
            continue
        best = min(t for t in (row.eager_us, row.compile_us, row.native_us) if t > 0)
        vs_eager.append(row.eager_us / row.candidate_us)
        vs_best.append(best / row.candidate_us)
    return _geomean(vs_eager), _geomean(vs_best)


def judge_reward(obs: pb.JudgeObservation) -> tuple[int, str, float, float]:
    """(reward, reason, speedup_vs_eager, speedup_vs_best) for what the judge observed."""
    if not obs.HasField("static_check") or not obs.static_check.passed:
        return -1, f"static check failed: {first_finding(obs.static_check) or 'not run'}", 0.0, 0.0
    if not obs.HasField("contract") or not obs.contract.passed:
        return -1, f"contract check failed: {obs.contract.error or 'not run'}", 0.0, 0.0
    cor = obs.correctness
    if not obs.HasField("correctness") or not cor.passed:
        return -1, f"correctness failed: {cor.error or 'not run'}", 0.0, 0.0
    checked = f"correct on {cor.checks_passed}/{cor.checks_run} checks ({cor.dtype}, max abs err {cor.max_abs_err:.2g})"
    timing = obs.timing
    vs_eager, vs_best = speedups(timing) if timing.measured else (0.0, 0.0)
    if vs_eager <= 0:
        if cor.interpreted or not timing.reason:
            why = UNTIMED_CPU if cor.interpreted else "untimed; reward capped at +1"
        else:
            why = f"untimed ({timing.reason}); reward capped at +1"
        return 1, f"{checked}; {why}", 0.0, 0.0
    figures = f"{vs_eager:.2f}x vs eager, {vs_best:.2f}x vs best baseline (geomean of {len(timing.rows)} shapes)"
    if vs_eager > SUSPICIOUS or vs_best > SUSPICIOUS:
        figures += f"; over {SUSPICIOUS:g}x: check the measurement"
    if vs_eager > FASTER and vs_best > FASTER:
        return 3, f"{checked}; {figures}: faster than every baseline", vs_eager, vs_best
    if vs_eager > FASTER:
        return 2, f"{checked}; {figures}: > 5% faster than eager", vs_eager, vs_best
    return 1, f"{checked}; {figures}: not > 5% faster than eager", vs_eager, vs_best
