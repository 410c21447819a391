"""The sandbox child runs the parent's cases; the parent decides: the honest template passes, a wrong kernel fails."""

from __future__ import annotations

from judge_testkit import honest_source, prepared, run_prepared

from services.core.pb import events_pb2 as pb
from services.judge import verdict
from services.judge.reward import judge_reward
from services.judge.sandbox import SandboxLimits

LIMITS = SandboxLimits(timeout_s=120)


def _verdict(ready, outcome, tally) -> tuple[int, str, float, float]:
    facts = outcome.facts
    evidence = verdict.evidence(tally, ready.cases, seed_base=ready.job.seed_base, dtype="bfloat16", facts=facts,
                                interpreted=True)  # fmt: skip
    obs = pb.JudgeObservation(
        static_check=pb.StaticEvidence(passed=True),
        contract=pb.ContractEvidence(passed=True),
        correctness=evidence,
        timing=outcome.timing,
        sandbox=outcome.sandbox,
    )
    return judge_reward(obs)


async def test_the_honest_kernel_passes_every_check(tmp_path):
    ready = prepared(honest_source())
    outcome, tally = await run_prepared(ready, LIMITS, tmp_path)
    assert outcome.facts.get("loaded"), (outcome.facts, outcome.log_tail)
    assert not tally.error, (tally.rule, tally.error)
    # every case once, 4 again with another case's answer in their output, the first again after the 48 stress calls
    assert tally.run == tally.passed == len(ready.cases) + 4 + min(6, len(ready.cases))
    assert outcome.facts["stress_calls"] == 48 and not outcome.facts["problems"]
    slowest = outcome.facts["slowest_call"]  # every call ran under the clock, far inside its limit
    assert slowest["limit_s"] == 20.0 and 0 < slowest["share"] < 0.5 and not outcome.facts["call_problems"]
    assert tally.max_ratio <= 1 and tally.max_abs > 0
    assert not outcome.timing.measured and "no GPU" in outcome.timing.reason
    box = outcome.sandbox
    assert box.ran and box.exit == "code 0" and box.network in ("netns", "audit-hook") and not box.rule_id
    assert any(w.startswith("limit: address space") for w in box.walls) and any("audit hook" in w for w in box.walls)
    reward, reason, *_ = _verdict(ready, outcome, tally)
    assert reward == 1 and "reward capped at +1" in reason
    assert list(tmp_path.iterdir()) == []  # the scratch directory is gone


async def test_every_judging_draws_fresh_cases_and_a_wrong_kernel_fails_in_the_parent(tmp_path):
    first = prepared(honest_source())
    wrong = honest_source().replace("y = w * normed", "y = normed")
    second = prepared(wrong)
    assert first.job.seed_base != second.job.seed_base
    outcome, tally = await run_prepared(second, LIMITS, tmp_path)
    assert outcome.facts.get("loaded") and not outcome.facts["problems"]  # the child saw nothing wrong: it cannot
    assert tally.rule == "outside-tolerance" and tally.error.startswith(second.cases[0].name)
    reward, reason, *_ = _verdict(second, outcome, tally)
    assert reward == -1 and reason.startswith("correctness failed: outside-tolerance: ")
    assert outcome.timing.reason == "incorrect: not timed"  # the parent judged the first pass and said stop


def test_modules_built_under_a_device_context_land_there_with_the_poison_installed():
    """The child installs the poisoned allocators before it builds its oracle under `with torch.device(...)`.
    A module whose __init__ allocates with torch.empty (torch.nn.LayerNorm) must still land on that device:
    once it landed on the CPU and every LayerNorm went untimed on the GPU. A fresh interpreter, because torch
    builds the set of factory functions the context recognises once per process."""
    import subprocess
    import sys

    code = (
        "import torch\n"
        "from services.judge.poison import POISON\n"
        "POISON.install()\n"
        "with torch.device('meta'):\n"
        "    m = torch.nn.LayerNorm(8)\n"
        "print(m.weight.device.type, m.bias.device.type)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.split() == ["meta", "meta"], out.stdout + out.stderr


def test_a_call_past_its_own_limit_is_a_timeout_naming_the_call():
    import json as _json

    from services.core.pb import events_pb2 as _pb
    from services.judge.sandbox import _parse_answer

    detail = "case 0 at 2x3x64 was still running at its per-call limit of 20.0 s (3.6 kB moved)"
    fact = {"call": "case 0", "shape": "2x3x64", "bytes": 3584, "limit_s": 20.0, "detail": detail}
    raw = _json.dumps({"nonce": "n", "facts": {"loaded": True, "problems": [], "call_timeout": fact}, "timing": {},
                       "walls": {"network": "netns", "walls": ["w"]}}).encode()  # fmt: skip
    outcome = _parse_answer(raw, "n", _pb.SandboxEvidence(ran=True), "")
    assert outcome.sandbox.rule_id == "timeout" and outcome.sandbox.error == detail
