"""Is a candidate data we may run? The kernel schema, the op family's plan check and the dataflow check, in one
verdict.

Pure and shared: the judge runs it before anything else, the server again before it loads a kernel.
A candidate is kernel source (services.core.kernel_schema) plus a launch plan its op family checks
(services.ops), each launch's values flowing only where they may (services.core.kernel_dataflow); one
recorded before candidates became data has no plan and is refused: its host code would have to run to use it.
"""

from __future__ import annotations

from services.core import kernel_dataflow, kernel_schema, row_locality
from services.core.pb import events_pb2 as pb
from services.ops import UnknownFamily, family

FORMAT_RULES: dict[str, str] = {
    "candidate-format": "a candidate is @triton.jit kernel source plus a launch plan; host code never runs",
    "launch-plan": "the launch plan must fit its op family's vocabulary and the source's kernel signatures",
}


def check_candidate(source: str, plan: pb.LaunchPlan) -> pb.StaticEvidence:
    """Every finding of the kernel schema and the plan check; passed when there is none."""
    report = kernel_schema.check_kernel_source(source)
    findings = list(report.findings)
    if not plan.launches and not plan.family:
        findings.insert(
            0,
            pb.Finding(
                rule_id="candidate-format",
                reason="no launch plan: a candidate is @triton.jit kernel source plus a plan, and no host code runs",
            ),
        )
    elif report.passed:
        try:
            fam = family(plan.family)
        except UnknownFamily as exc:
            findings.append(pb.Finding(rule_id="launch-plan", reason=str(exc)))
        else:
            findings.extend(fam.check_plan(plan, report.kernels))
            try:
                if not findings:  # the plan fits: now where each launch's values flow, for every input
                    findings.extend(kernel_dataflow.check_plan(source, plan, fam.ARG_ROLES))
                if not findings:  # and which rows each program reads (services.core.row_locality)
                    spaces, owners = getattr(fam, "ROW_SPACES", None), getattr(fam, "STRIDE_OWNERS", None)
                    findings.extend(row_locality.check_plan(source, plan, fam.ARG_ROLES, spaces, owners))
            except Exception as exc:  # noqa: BLE001 - untrusted source: a check it breaks refuses it, never a crash
                findings.append(
                    pb.Finding(
                        rule_id="candidate-format",
                        reason=f"the static checks could not read this kernel ({type(exc).__name__}): not followed",
                    )
                )
    checked = [*report.rules_checked, *FORMAT_RULES, *kernel_dataflow.RULES, *row_locality.RULES]
    return pb.StaticEvidence(passed=not findings, findings=findings, rules_checked=checked)


def first_finding(evidence: pb.StaticEvidence) -> str:
    """'rule-id: reason (line n)' of the first finding, for reasons and logs."""
    if not evidence.findings:
        return ""
    f = evidence.findings[0]
    return f"{f.rule_id}: {f.reason}" + (f" (line {f.line})" if f.line else "")


def finding_summary(evidence: pb.StaticEvidence) -> str:
    """The first finding in full, then the other rules that fired: what a verdict says of a static failure.

    Verdicts recorded since the first schema quote this text, so it must not change (replay re-derives it).
    """
    first = first_finding(evidence)
    others = sorted({f.rule_id for f in evidence.findings[1:]} - {evidence.findings[0].rule_id}) if first else []
    return first + (f"; also {', '.join(others)}" if others else "")
