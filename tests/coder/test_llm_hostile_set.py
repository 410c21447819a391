"""The LLM author's hostile set as one list: every kernel of the adversarial corpus, sent as an author's answer.

An author answers with kernel source and a launch plan, never a contract (the coder derives that), so each corpus
entry whose trick lives in its source or plan is an answer an author can give. Each one either ends at the author's
own check (not Triton, or no launch plan: refused before the judge sees it) or becomes a candidate with exactly the
corpus entry's bytes, which the judge's layers decide as tests/adversarial says (the static layer checked here,
every layer there). No entry is skipped silently: the list is the corpus's table, and its counts are checked.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from coder_testkit import Log, profile_captured

from services.coder import domain, llm_answer
from services.core.candidate_check import check_candidate
from services.core.pb import events_pb2 as pb

TESTS = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(TESTS), str(TESTS / "adversarial")]  # the corpus and its file reader, as tests/adversarial uses
import adversarial_corpus  # noqa: E402

# What an author can send: a source file, with the contract the coder derives (an entry that changes the contract
# is an attack on the coder's contract, which no answer carries).
ANSWERABLE = [e for e in adversarial_corpus.TABLE if e.file and not e.contract_change]


def _ask():
    log = Log()
    policy = pb.SwapPolicy(min_reward=1, name="cpu-untimed", reason="test")
    log.append(pb.RunRequested(model="tiny-qwen2", policy=policy, max_candidates=3, author="gemini"))
    captured = profile_captured()
    log.append(captured)
    skills = log.append(pb.SkillsRetrieved(target_class=captured.target_class))
    [ask] = domain.decide(log.records, skills)
    return log, ask


def _answered(entry):
    source, plan = entry.candidate()
    log, ask = _ask()
    observed = pb.AuthorObservation(
        provider="gemini", model="m", answer=llm_answer.answer_of(source, plan), finish_reason="STOP", attempts=1
    )
    return domain.answered(log.records, ask, observed), (source, plan), ask


@pytest.mark.parametrize("entry", ANSWERABLE, ids=lambda e: e.name)
def test_each_corpus_kernel_as_an_answer_is_refused_by_the_author_or_is_the_corpus_candidate(entry):
    out, (source, plan), ask = _answered(entry)
    layer, rule = entry.expected("cpu")
    if isinstance(out, pb.TargetConcluded):  # the author's own check: only for what the judge's first layer refuses
        refused = re.search(r"could not propose candidate 1: (not Triton|schema)", out.reason)
        assert layer == "static" and refused, (entry.name, out.reason)
        return
    assert isinstance(out, pb.CandidateProposed) and out.origin == "llm"
    assert out.source == source and out.plan == plan and out.contract == ask.contract, entry.name
    static = check_candidate(out.source, out.plan)  # the judge's first layer, as it runs it
    if layer == "static":
        rules = [f.rule_id for f in static.findings]
        assert not static.passed and rules[0] == rule, (entry.name, rules)
    else:  # decided later, on the corpus's live module: tests/adversarial judges these very bytes
        assert static.passed, (entry.name, [f.rule_id for f in static.findings])


def test_the_set_covers_the_corpus_and_its_honest_kernels_reach_the_judge():
    kinds = {"author": 0, "static": 0, "later": 0, "honest": 0}
    for entry in ANSWERABLE:
        out, _, _ = _answered(entry)
        layer, _ = entry.expected("cpu")
        if isinstance(out, pb.TargetConcluded):
            kinds["author"] += 1
        elif layer == "passes":
            kinds["honest"] += 1
        else:
            kinds["static" if layer == "static" else "later"] += 1
    # on this CPU (memory_overread_gpu_grid_only is hostile on a GPU only: it passes here)
    hostile = sum(1 for e in adversarial_corpus.TABLE if e.file and e.expected("cpu")[0] != "passes")
    changes = sum(1 for e in adversarial_corpus.TABLE if e.contract_change)
    assert kinds["author"] + kinds["static"] + kinds["later"] == hostile - changes, kinds
    assert kinds["honest"] == sum(1 for e in ANSWERABLE if e.expected("cpu")[0] == "passes") > 0, kinds
    assert kinds["later"] > 20, kinds  # the kernel-only generation: tricks no schema sees reach the later layers
