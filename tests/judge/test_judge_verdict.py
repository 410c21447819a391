"""The parent's verdict on what a child returned: outputs are data, facts are data, the parent counts.

No child runs here: the outputs are what a child could write into its outputs file, honest or not,
and the references are the parent's own (the live module's forward on the drawn cases).
"""

from __future__ import annotations

import io
import os

import pytest
import torch
from judge_testkit import honest_source, prepared

from services.judge import verdict


@pytest.fixture(scope="module")
def ready():
    return prepared(honest_source(), examples=4)


def _blob(**parts) -> bytes:
    buffer = io.BytesIO()
    torch.save(parts, buffer)
    return buffer.getvalue()


def _honest(ready, **changes) -> tuple[dict, bytes]:
    """Facts and outputs of a child whose candidate answered exactly what the module itself answers."""
    own = [ref.own for ref in ready.refs]
    parts = {"outputs": own, "second": own[0].clone(), "ghost": torch.full_like(own[0], float("nan")), "after": own[:6]}
    parts.update(prefilled_cases=[[1, 0]], prefilled=[own[1].clone()])  # case 1 again, case 0's answer in its output
    parts.update(changes)
    return {"loaded": True, "problems": [], "after_problems": [], "stress_calls": 48}, _blob(**parts)


def test_the_modules_own_answers_pass_every_check(ready):
    facts, blob = _honest(ready)
    tally = verdict.judge_outputs(ready.cases, ready.refs, facts, blob)
    assert not tally.error and tally.run == tally.passed == len(ready.cases) + 6 + 1
    evidence = verdict.evidence(tally, ready.cases, seed_base=7, dtype="bfloat16", facts=facts, interpreted=True)
    assert evidence.passed and evidence.cases == len(ready.cases) and evidence.stress_calls == 48
    assert set(evidence.regimes) >= {"normal", "huge", "zeros", "tiny", "nonfinite"}
    assert 0 < evidence.max_ulp_err <= 1


@pytest.mark.parametrize(
    "change,rule",
    [
        ({"second": "perturb"}, "nondeterministic"),
        ({"ghost": "same"}, "ghost"),
        ({"after": "biased"}, "drift"),
        ({"outputs": "one-missing"}, "missing-outputs"),
        ({"outputs": "fp32"}, "wrong-dtype-or-shape"),
        ({"outputs": "nan"}, "nan-output"),
        ({"outputs": "biased"}, "outside-tolerance"),
    ],
)
def test_each_way_an_answer_is_wrong_names_its_rule(ready, change, rule):
    own = [ref.own for ref in ready.refs]
    ((key, how),) = change.items()
    if how == "perturb":
        value = own[0].clone()
        value.view(-1)[0] = value.view(-1)[0] * 2 + 1
    elif how == "same":
        value = own[0].clone()
    elif how == "biased":
        value = [o * 1.02 for o in own] if key == "outputs" else [o * 1.02 for o in own[:6]]
    elif how == "one-missing":
        value = own[:-1]
    elif how == "fp32":
        value = [o.float() for o in own]
    else:  # nan: one unwritten element where the module's answer is finite
        value = [o.clone() for o in own]
        value[0].view(-1)[0] = float("nan")
    facts, blob = _honest(ready, **{key: value})
    tally = verdict.judge_outputs(ready.cases, ready.refs, facts, blob)
    assert tally.rule == rule, (tally.rule, tally.error)


def test_a_case_pre_filled_with_another_answer_must_answer_its_own_input(ready):
    own = [ref.own for ref in ready.refs]
    case, donor = next(
        (c, d)
        for c in range(len(own))
        for d in range(len(own))
        if c != d and own[c].shape == own[d].shape and torch.isfinite(own[c]).all() and not torch.equal(own[c], own[d])
    )
    facts, blob = _honest(ready, prefilled_cases=[[case, donor]], prefilled=[own[donor].clone()])  # the donor's kept
    tally = verdict.judge_outputs(ready.cases, ready.refs, facts, blob, first_pass=True)
    assert tally.rule in ("outside-tolerance", "nan-output", "missing-nonfinite"), tally.error
    name, donor_name = ready.cases[case].name, ready.cases[donor].name
    assert tally.error.startswith(f"its output pre-filled with {donor_name}'s answer, {name}"), tally.error
    facts, blob = _honest(ready, prefilled_cases=[[0, 0]])
    assert verdict.judge_outputs(ready.cases, ready.refs, facts, blob).rule == "missing-outputs"
    facts, blob = _honest(ready, prefilled=None)
    assert verdict.judge_outputs(ready.cases, ready.refs, facts, blob).rule == "missing-outputs"


def test_a_write_to_the_input_in_the_timing_calls_names_its_own_rule(ready):
    facts, blob = _honest(ready)
    problem = {"rule": "modified-input", "detail": "during the timing calls the kernel wrote to its input buffer 3"}
    tally = verdict.judge_outputs(ready.cases, ready.refs, {**facts, "call_problems": [problem]}, blob)
    assert tally.rule == "modified-input" and tally.error == problem["detail"]


def test_the_childs_facts_are_read_as_data_and_named(ready):
    facts, blob = _honest(ready)
    assert verdict.judge_outputs(ready.cases, ready.refs, {"loaded": False, "load_error": "E"}, blob).rule == (
        "load-failed"
    )
    assert verdict.judge_outputs(ready.cases, ready.refs, {**facts, "tampered": "x"}, blob).rule == "tampered"
    problem = {"case": 2, "rule": "guard-bytes", "detail": "1 guard region(s) overwritten"}
    tally = verdict.judge_outputs(ready.cases, ready.refs, {**facts, "problems": [problem]}, blob)
    assert tally.rule == "guard-bytes" and tally.error.startswith(ready.cases[2].name)
    tally = verdict.judge_outputs(ready.cases, ready.refs, {**facts, "after_problems": [problem]}, blob)
    assert tally.rule == "drift"


class _Exploit:
    def __reduce__(self):
        return (os.system, (f"touch {MARKER}",))


MARKER = "/tmp/yantra-verdict-unpickled"


def test_an_outputs_file_that_would_run_code_is_not_unpickled(ready):
    if os.path.exists(MARKER):
        os.remove(MARKER)
    facts, _ = _honest(ready)
    tally = verdict.judge_outputs(ready.cases, ready.refs, facts, _blob(outputs=_Exploit()))
    assert tally.rule == "missing-outputs" and not os.path.exists(MARKER)


def test_references_refuse_a_bound_the_modules_own_output_fails(ready):
    def shifted(width):  # a "module" whose own answer is 5% off its fp32 run: the bound would be wrong
        module = torch.nn.Module()
        module.weight = torch.nn.Parameter(torch.ones(width))
        module.forward = lambda x: x * (1.05 if x.dtype != torch.float32 else 1.0)
        return module

    from services.ops import judging

    with pytest.raises(verdict.BoundError):
        judging("row_reduction").references(ready.cases[:1], shifted, "weight")


def test_a_rejections_evidence_carries_the_error_that_sank_it(ready):
    """The structured error of a rejected candidate is the one its text reports, never 0."""
    own = [ref.own.clone() for ref in ready.refs]
    own[0].view(-1)[0] = ready.refs[0].hi.view(-1)[0] + 0.5  # one element far off in the first case
    facts, blob = _honest(ready, outputs=own)
    tally = verdict.judge_outputs(ready.cases, ready.refs, facts, blob)
    evidence = verdict.evidence(tally, ready.cases, seed_base=7, dtype="bfloat16", facts=facts, interpreted=True)
    assert not evidence.passed and evidence.rule_id == "outside-tolerance"
    assert evidence.max_abs_err >= 0.4 and evidence.max_ulp_err > 1
    assert evidence.errors and evidence.errors[0].max_abs_err == evidence.max_abs_err
