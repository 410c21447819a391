"""The reward, recomputed in the judge's own process from measured numbers (pure).

Ladder: -1 rejected or wrong (any layer); +1 correct but untimed or not > 5% faster than eager;
+2 > 5% faster than eager (geometric mean over shapes); +3 also > 5% faster than the best
baseline (per shape the fastest of eager, torch.compile and the native fused op). The speedups
compare GPU time per call (services.judge.timing). A time the judge does not believe (still under
the copy ceiling after re-measurement) caps the reward at +1, and so does a candidate slower than
eager host-inclusive at some shape (its launch costs more than eager's whole call: swapped into a
server that launches eagerly it would slow it down) unless, since schema 5, it was captured in CUDA
graphs at every shape (a graph-serving server never pays the host's time; an eager one refuses it);
a missing torch.compile baseline caps it at +2. Since schema 3 the judge's parent checks the child's
figures against its own copy ceiling and clock (services.judge.timing_check): figures it does not
believe cap the reward at +1. The reason names the layer and the rule.
"""

from __future__ import annotations

import math

from services.core.candidate_check import finding_summary
from services.core.pb import events_pb2 as pb
from services.judge import fenced_pass

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


def _rejected(obs: pb.JudgeObservation) -> str:
    """Why the candidate is rejected, naming layer and rule; "" when every layer passed."""
    if not obs.HasField("static_check") or not obs.static_check.passed:
        return f"static check failed: {finding_summary(obs.static_check) or 'not run'}"
    if not obs.HasField("contract") or not obs.contract.passed:
        rule = f"{obs.contract.rule_id}: " if obs.contract.rule_id else ""
        return f"contract check failed: {rule}{obs.contract.error or 'not run'}"
    box = obs.sandbox
    if box.rule_id:
        return f"sandbox: {box.rule_id}: {box.error}"
    if box.gpu_health and box.gpu_health not in ("ok", "no GPU"):
        return f"sandbox: gpu-unhealthy: the GPU health probe after the child {box.gpu_health}"
    cor = obs.correctness
    if not obs.HasField("correctness") or not cor.passed:
        rule = f"{cor.rule_id}: " if cor.rule_id else ""
        return f"correctness failed: {rule}{cor.error or 'not run'}"
    # Last: a GPU judging whose own pass was right, run again under the interpreter with every tensor fenced.
    fenced = fenced_pass.failure(obs)
    if fenced:
        layer, rule, why = fenced
        return f"sandbox: {rule}: {why}" if layer == "sandbox" else f"correctness failed: {rule}: {why}"
    return ""


def judge_reward(
    obs: pb.JudgeObservation,
    *,
    parent_checks_timing: bool = True,
    graphs_hide_the_host: bool = True,
    error_of_bound: bool = True,
) -> tuple[int, str, float, float]:
    """(reward, reason, speedup_vs_eager, speedup_vs_best) for what the judge observed.

    `parent_checks_timing` (schema 3 on): figures the parent did not believe, or did not check, earn +1 at most.
    `graphs_hide_the_host` (schema 5 on): a kernel captured in CUDA graphs at every timed shape (the
    "cuda-graph" capability) is not capped for its host-inclusive time: a server that decodes through graphs
    never pays it, and one that serves eagerly refuses it itself (services.server.domain.host_problem).
    `error_of_bound` (schema 12 on): a correct kernel's worst error is said as its share of the bound the dtype's
    rounding allows (an absolute error of 4e+06 on rows of 1e+09 read as a wrong kernel); before, the absolute one.
    """
    rejected = _rejected(obs)
    if rejected:
        return -1, rejected, 0.0, 0.0
    cor = obs.correctness
    error = f"max abs err {cor.max_abs_err:.2g}"
    if error_of_bound:
        error = f"worst error {cor.max_ulp_err:.2f} of its bound"
    checked = f"correct on {cor.checks_passed}/{cor.checks_run} checks ({cor.dtype}, {error})"
    timing = obs.timing
    vs_eager, vs_best = speedups(timing) if timing.measured else (0.0, 0.0)
    if vs_eager <= 0:
        if cor.interpreted or not timing.reason:
            why = UNTIMED_CPU if cor.interpreted else "untimed; reward capped at +1"
        else:
            why = f"untimed ({timing.reason}); reward capped at +1"
        return 1, f"{checked}; {why}", 0.0, 0.0
    figures = f"{vs_eager:.2f}x vs eager, {vs_best:.2f}x vs best baseline (geomean of {len(timing.rows)} shapes)"
    if parent_checks_timing and not (obs.HasField("timing_check") and obs.timing_check.believed):
        why = obs.timing_check.reason if obs.HasField("timing_check") else "the parent did not check the figures"
        return 1, f"{checked}; {figures}; timing not believed: {why}; reward capped at +1", vs_eager, vs_best
    implausible = [row.shape for row in timing.rows if row.flag.startswith("implausible")]
    if implausible:
        why = f"timing not believed at {', '.join(implausible)}: faster than the copy ceiling after re-measuring"
        return 1, f"{checked}; {figures}; {why}; reward capped at +1", vs_eager, vs_best
    slower_host = [
        f"{row.shape} ({row.candidate_host_us:.1f} vs {row.eager_host_us:.1f} us)"
        for row in timing.rows
        if row.candidate_host_us > 0 and row.eager_host_us > 0 and row.candidate_host_us > FASTER * row.eager_host_us
    ]
    if slower_host and not (graphs_hide_the_host and CUDA_GRAPH in capabilities(obs)):
        why = f"slower than eager host-inclusive at {', '.join(slower_host)}: it would slow an eager caller"
        return 1, f"{checked}; {figures}; {why}; reward capped at +1", vs_eager, vs_best
    if slower_host:
        figures += f"; slower than eager host-inclusive at {', '.join(slower_host)} (an eager server refuses it)"
    if any(row.remeasured for row in timing.rows) or vs_eager > SUSPICIOUS or vs_best > SUSPICIOUS:
        figures += f"; over {SUSPICIOUS:g}x somewhere: re-measured and kept"
    no_compile = [row.shape for row in timing.rows if row.compile_us <= 0]
    if vs_eager > FASTER and vs_best > FASTER and not no_compile:
        return 3, f"{checked}; {figures}: faster than every baseline", vs_eager, vs_best
    if vs_eager > FASTER:
        cap = f" (torch.compile did not run at {', '.join(no_compile)}: +3 needs it)" if no_compile else ""
        return 2, f"{checked}; {figures}: > 5% faster than eager{cap}", vs_eager, vs_best
    return 1, f"{checked}; {figures}: not > 5% faster than eager", vs_eager, vs_best


CUDA_GRAPH = "cuda-graph"


def capabilities(obs: pb.JudgeObservation) -> list[str]:
    """What the evidence shows the kernel can do (pure). "cuda-graph": timing captured the candidate in a CUDA graph
    at every timed shape and replayed it with its outputs checked (services.judge.timing) — the server may then
    capture it in its own decode graphs."""
    timing = obs.timing
    if obs.correctness.passed and timing.measured and timing.rows:
        if not any(m.startswith("candidate graph at") for m in timing.missing):
            return [CUDA_GRAPH]
    return []
