"""Every family a CPU judges over the served range (services.judge.sampled_grid): its template's first candidate for
a live target passes with a sample of its programs run at each size up to the maximum, and the same kernel with its
stores skipped past a program near the end of the largest, which every smaller case drawn passes, is rejected
there. The dataflow check refuses that kernel first (`row-pick`: the row compared with the row); with that rule
switched off, the sampled range stands behind it."""

from __future__ import annotations

import asyncio
import re

import pytest
from judge_testkit import log_of
from test_family_protocol import NAMES, live

from services.core import kernel_dataflow
from services.core.kernels import candidate_sha256
from services.core.pb import events_pb2 as pb
from services.judge.service import JudgeService

SAMPLED = re.compile(r"the served range on a CPU \((sampled-domain[^)]*)\): ([\d,]+) of ([\d,]+) programs of (\w+) ran")


def _judge(proposal: pb.CandidateProposed, target_class: str) -> pb.CandidateJudged:
    captured = pb.ProfileCaptured(observed=live_observed(proposal), target_class=target_class)
    prior = log_of(captured, proposal)
    [judged] = asyncio.run(JudgeService(device="cpu").handle(prior[-1], prior))
    return judged


def live_observed(proposal: pb.CandidateProposed) -> pb.ProfileObservation:
    return live(proposal.plan.family).observed


def _capped(source: str, cap: int) -> str:
    """The source with every store made only by programs up to `cap` (no constant compared with the program id
    alone: `hidden-boundary` does not see it; `row-pick` does)."""
    pid = "tl.program_id(0)"
    capped, count = re.subn(
        r"^( +)(tl\.store\(.*\))$",
        lambda m: f"{m[1]}if {pid} * {pid} < {cap} * {pid} + 1:\n{m[1]}    {m[2]}",
        source,
        flags=re.M,
    )
    assert count, "the template's stores were not found"
    return capped


@pytest.mark.parametrize("name", NAMES)
def test_a_cpu_judging_runs_a_sample_of_the_programs_at_the_served_maximum(name, monkeypatch):
    honest = live(name).proposal
    target_class = honest.target_class
    judged = _judge(honest, target_class)
    assert judged.reward >= 1, judged.reason
    sampled = [m for m in (SAMPLED.search(line) for line in judged.observed.correctness.checks) if m]
    assert len(sampled) >= 2, judged.observed.correctness.checks  # a spread of the served range, its maximum last
    found = sampled[-1]
    ran, grid = int(found[2].replace(",", "")), int(found[3].replace(",", ""))
    assert 4 <= ran < grid, found[0]  # a sample, not the launch

    # the same kernel leaves the programs past grid - 2 unwritten: right at every case the interpreter runs whole
    hostile = pb.CandidateProposed()
    hostile.CopyFrom(honest)
    hostile.candidate_id = f"{name}-capped"
    hostile.source = _capped(honest.source, grid - 2)
    hostile.source_sha256 = candidate_sha256(hostile.source, hostile.plan)
    judged = _judge(hostile, target_class)
    assert judged.reward == -1 and judged.observed.static_check.findings[0].rule_id == "row-pick", judged.reason

    # behind the rule: with it switched off the kernel reaches the cases, and the sampled range meets its cap
    monkeypatch.setattr(kernel_dataflow._Kernel, "row_compare", lambda self, node, parts: kernel_dataflow.INDEX)
    judged = _judge(hostile, target_class)
    assert judged.reward == -1
    assert judged.observed.correctness.rule_id == "nan-output", judged.reason
    assert (
        "sampled-domain" in judged.observed.correctness.error and "wrote nothing" in judged.observed.correctness.error
    )
