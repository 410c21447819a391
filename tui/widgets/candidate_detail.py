"""A candidate in full: its Triton source, its launch plan and contract, and the judge's evidence layer by layer."""

from __future__ import annotations

from google.protobuf.message import Message
from rich.console import Group, RenderableType
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from tui.figures import copy_bandwidth_fraction, fmt_err, fmt_pct, fmt_ratio, fmt_us, short_class
from tui.model import CandidateView, RunView, judged_dtype_bytes

PASS = ("✔", "bold green")
FAIL = ("✘", "bold red")


def source_renderable(c: CandidateView) -> RenderableType:
    if c.proposed is None:
        return Text("the proposal of this candidate is not in the log", style="dim")
    m = c.proposed.msg
    return Syntax(m.source, "python", theme="ansi_dark", line_numbers=True, word_wrap=False)


def contract_renderable(c: CandidateView) -> RenderableType:
    if c.proposed is None:
        return Text("the proposal of this candidate is not in the log", style="dim")
    m = c.proposed.msg
    k = m.contract
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="dim", no_wrap=True)
    facts.add_column()
    facts.add_row("kind", k.kind or "-")
    facts.add_row("target", k.target or m.target_class)
    facts.add_row("entrypoint", k.entrypoint or "-")
    facts.add_row("inputs", ", ".join(k.inputs) or "-")
    facts.add_row("origin", f"{m.origin} {m.skill_id}".strip() + f" (attempt {m.attempt})")
    c_ = m.config
    facts.add_row("config", f"{c_.template} num_warps={c_.num_warps} rows_per_program={c_.rows_per_program}")
    for i, launch in enumerate(m.plan.launches):  # a candidate is kernels + this plan (schema 3)
        when = f"rows <= {launch.max_rows}" if launch.max_rows else "any rows"
        exprs = ", ".join(f"{k}={v}" for k, v in sorted(launch.constexprs.items()))
        facts.add_row(
            "launch" if i == 0 else "",
            f"{launch.kernel}({', '.join(launch.args)}; {exprs}) grid {launch.grid}, "
            f"{launch.num_warps} warps ({m.plan.family}, {when})",
        )
    facts.add_row("sha256", m.source_sha256)
    binds = Table(box=None, header_style="dim", pad_edge=False)
    for col in ("kernel parameter", "module attribute", "kind"):
        binds.add_column(col, no_wrap=True)
    for b in k.bindings:
        binds.add_row(b.param, b.attr, b.kind)
    return Group(facts, Text(""), Text("bindings (read from the live module on every call)", style="bold"), binds)


def _layer(ok: bool, name: str, detail: str) -> Text:
    icon, style = PASS if ok else FAIL
    out = Text()
    out.append(f"{icon} ", style=style)
    out.append(f"{name:<12}", style="bold")
    out.append(detail)
    return out


def _timing_table(o: Message, dtype_bytes: int, peak: float) -> Table:
    table = Table(box=None, header_style="dim", pad_edge=False, padding=(0, 1))
    for col in ("shape", "candidate", "eager", "compile", "native", "host", "vs eager", "%BW"):
        table.add_column(col, justify="right" if col != "shape" else "left", no_wrap=True)
    for r in o.timing.rows:
        host = f"{fmt_us(r.candidate_host_us)}/{fmt_us(r.eager_host_us)}" if r.candidate_host_us else "-"
        vs = fmt_ratio(r.eager_us / r.candidate_us) if r.candidate_us and r.eager_us else "-"
        bw = fmt_pct(copy_bandwidth_fraction([r], dtype_bytes, peak))
        table.add_row(
            r.shape, fmt_us(r.candidate_us), fmt_us(r.eager_us), fmt_us(r.compile_us), fmt_us(r.native_us), host,
            vs, bw,
        )  # fmt: skip
    return table


def evidence_renderable(c: CandidateView, run: RunView) -> RenderableType:
    if c.judged is None:
        return Text("judging…: the judge answers CandidateProposed with CandidateJudged", style="yellow")
    m = c.judged.msg
    o = m.observed
    parts: list[RenderableType] = []
    s = o.static_check
    parts.append(_layer(s.passed, "static", f"{len(s.rules_checked)} rules: {', '.join(s.rules_checked)}"))
    for f in s.findings:
        parts.append(Text(f"    {f.rule_id} line {f.line}: {f.reason}", style="red"))
    k = o.contract
    parts.append(_layer(k.passed, "contract", " · ".join(k.checks) + (f" — {k.error}" if k.error else "")))
    cor = o.correctness
    detail = (
        f"{cor.checks_passed}/{cor.checks_run} checks · {cor.dtype} · {cor.seeds} seeds · "
        f"max abs {fmt_err(cor.max_abs_err)} rel {fmt_err(cor.max_rel_err)}"
        + (" · interpreted (TRITON_INTERPRET=1)" if cor.interpreted else "")
    )
    parts.append(_layer(cor.passed, "correctness", detail))
    parts.append(Text(f"    shapes {', '.join(cor.shapes)}", style="dim"))
    if cor.error:
        parts.append(Text(f"    {cor.error}", style="red"))
    t = o.timing
    if t.measured:
        how = "GPU time per call (CUDA-graph replay) · host = host-inclusive, candidate/eager"
        parts.append(_layer(True, "timing", f"{t.device_name} · {how}"))
        peak = run.profile.peak_bytes_per_s if run.profile else 0.0
        parts.append(_timing_table(o, judged_dtype_bytes(run, m), peak))
    else:
        parts.append(Text(f"– timing      {t.reason or 'not measured'}", style="dim"))
    verdict = Text()
    verdict.append(
        f"⇒ reward {m.reward:+d} ", style="bold green" if m.reward >= 2 else "bold red" if m.reward < 0 else "bold"
    )
    verdict.append(m.reason)
    parts += [Text(""), verdict]
    parts.append(
        Text(
            f"  vs eager {fmt_ratio(c.vs_eager)} · compile {fmt_ratio(c.vs_compile)} · native {fmt_ratio(c.vs_native)}"
            f" · judged in {o.wall_s:.1f}s",
            style="dim",
        )
    )
    return Group(*parts)


def title_text(c: CandidateView, run: RunView) -> Text:
    out = Text(no_wrap=True, overflow="ellipsis")
    out.append(c.candidate_id, style="bold")
    out.append(f"  {c.origin} {c.origin_detail}  for {short_class(run.target_class)}  ")
    out.append(c.verdict, style="green" if (c.reward or 0) >= 2 else "red" if c.reward == -1 else "yellow")
    if c.swap:
        out.append(f"  swap {c.swap}", style="bold")
    return out
