"""A verdict in words, per layer: what was checked and the evidence (pure; for logs, the bench and docs).

`verdict_layer` names the layer that decided (static, contract, sandbox, correctness, timing) and
the rules that fired there; `describe` prints every layer's evidence, one block each.
"""

from __future__ import annotations

from services.core.pb import events_pb2 as pb
from services.judge import fenced_pass


def verdict_layer(obs: pb.JudgeObservation) -> tuple[str, list[str]]:
    """(layer, rule ids) that decided the verdict: ("passes", []) when every layer passed."""
    if not obs.static_check.passed:
        return "static", list(dict.fromkeys(f.rule_id for f in obs.static_check.findings))
    if not obs.contract.passed:
        return "contract", [obs.contract.rule_id]
    if obs.sandbox.rule_id:
        return "sandbox", [obs.sandbox.rule_id]
    if obs.sandbox.gpu_health and obs.sandbox.gpu_health not in ("ok", "no GPU"):
        return "sandbox", ["gpu-unhealthy"]
    if not obs.correctness.passed:
        return "correctness", [obs.correctness.rule_id or "unknown"]
    fenced = fenced_pass.failure(obs)
    if fenced:
        return fenced[0], [fenced[1]]
    return "passes", []


def _static(s: pb.StaticEvidence) -> list[str]:
    out = [f"static: {'passed' if s.passed else 'FAILED'} ({len(s.rules_checked)} rules checked)"]
    out += [f"  {f.rule_id} (line {f.line}): {f.reason}" for f in s.findings]
    return out


def _contract(c: pb.ContractEvidence) -> list[str]:
    out = [f"contract: {'passed' if c.passed else 'FAILED'}"]
    out += [f"  ok: {check}" for check in c.checks]
    if c.error:
        out.append(f"  {c.rule_id}: {c.error}")
    return out


def _sandbox(b: pb.SandboxEvidence) -> list[str]:
    out = [f"sandbox: exit {b.exit or '-'}, {b.wall_s:.1f} s, network {b.network or '-'}, {b.user or '-'}"]
    out += [f"  wall: {w}" for w in b.walls]
    out.append(f"  environment: {', '.join(b.env_keys)}")
    out += [f"  refused: {r}" for r in b.refused]
    out.append(f"  GPU health after: {b.gpu_health or '-'}")
    if b.rule_id:
        out.append(f"  {b.rule_id}: {b.error}")
    return out


def _correctness(c: pb.CorrectnessEvidence) -> list[str]:
    state = "passed" if c.passed else "FAILED"
    out = [f"correctness: {state}, {c.checks_passed}/{c.checks_run} checks, {c.dtype}, shapes {', '.join(c.shapes)}"]
    if c.cases:
        out.append(
            f"  {c.cases} cases, regimes {', '.join(c.regimes)}; worst error {c.max_ulp_err:.2f} of the honest bound, "
            f"largest bias {c.max_bias:.2g}"
        )
    out += [f"  checked: {check}" for check in c.checks]
    for e in c.errors:
        row = f", plus a per-row term up to {e.row_atol:.3g}" if e.row_atol else ""
        out.append(f"  max error {e.dtype}: abs {e.max_abs_err:.3g}, rel {e.max_rel_err:.3g} "
                   f"(atol {e.atol:g}, rtol {e.rtol:g}{row}, {e.checks} checks)")  # fmt: skip
    if c.error:
        out.append(f"  {c.rule_id}: {c.error}")
    return out


def _timing(t: pb.TimingEvidence) -> list[str]:
    if not t.measured:
        return [f"timing: not measured ({t.reason})"]
    out = [f"timing: {t.device_name}, copy ceiling {t.copy_bytes_per_s / 1e9:.0f} GB/s"]
    out += [f"  setting: {s}" for s in t.settings]
    for r in t.rows:
        line = (
            f"  {r.shape}: GPU candidate {r.candidate_us:.2f} us | eager {r.eager_us:.2f} | compile {r.compile_us:.2f} "
            f"| native {r.native_us:.2f} | floor {r.floor_us:.2f}"
        )
        if r.candidate_host_us:
            line += (
                f" | host {r.candidate_host_us:.2f} vs eager {r.eager_host_us:.2f}, compile {r.compile_host_us:.2f}, "
                f"native {r.native_host_us:.2f}"
            )
        if r.candidate_bench_us:
            line += (
                f" | do_bench {r.candidate_bench_us:.2f} vs eager {r.eager_bench_us:.2f}, compile "
                f"{r.compile_bench_us:.2f}, native {r.native_bench_us:.2f}"
            )
        elif r.candidate_graph_us:  # a run recorded before the graph figure decided
            line += f" | graph {r.candidate_graph_us:.2f} vs eager {r.eager_graph_us:.2f}"
        out.append(line + (f" | {r.flag}" if r.flag else ""))
    out += [f"  missing baseline: {m}" for m in t.missing]
    return out


def _timing_check(c: pb.TimingCheck) -> list[str]:
    state = "believed" if c.believed else f"NOT believed: {c.reason}"
    return [
        f"timing check (parent): {state}; its own copy ceiling {c.copy_bytes_per_s / 1e9:.0f} GB/s, "
        f"child wall {c.child_wall_s:.1f} s, figures account for {c.timed_us / 1e6:.3f} s"
    ]


def describe(judged: pb.CandidateJudged) -> str:
    """Every layer's evidence, in the order the judge ran them, then the verdict."""
    obs = judged.observed
    lines = [f"candidate {judged.candidate_id} ({judged.source_sha256[:12]})"]
    if obs.judge_id or obs.device:  # kept since many judges share the work; older verdicts name none
        lines.append(f"judged by {obs.judge_id or '?'} on {obs.device or '?'}")
    lines += _static(obs.static_check)
    if obs.HasField("contract"):
        lines += _contract(obs.contract)
    if obs.HasField("sandbox"):
        lines += _sandbox(obs.sandbox)
    if obs.HasField("fenced"):
        lines += fenced_pass.describe(obs.fenced)
    if obs.HasField("correctness"):
        lines += _correctness(obs.correctness)
    if obs.HasField("timing"):
        lines += _timing(obs.timing)
    if obs.HasField("timing_check"):
        lines += _timing_check(obs.timing_check)
    lines.append(f"verdict: reward {judged.reward:+d}: {judged.reason}")
    return "\n".join(lines)
