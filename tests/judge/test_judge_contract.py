"""The contract layer against the live class built on the meta device and the op family's wrapper; nothing runs."""

from __future__ import annotations

import torch
from judge_testkit import introspect, qwen_norm

from services.core.pb import events_pb2 as pb
from services.judge.contract_check import CONTRACT_RULES, check_contract
from services.judge.service import family_contract
from services.ops import row_reduction
from services.ops.row_reduction.contract import derive_contract

ENTRY = list(row_reduction.ENTRY_PARAMS)


def test_qwen2_rmsnorm_fits_the_family_wrapper():
    intro = introspect(qwen_norm())
    evidence = family_contract(row_reduction, derive_contract(intro), intro)
    assert evidence.passed, evidence.error
    assert "binding weight -> weight (tensor)" in evidence.checks
    assert "binding eps -> variance_epsilon (float)" in evidence.checks
    assert any("on meta" in c for c in evidence.checks)
    assert "each parameter is used as the kind bound to it" in evidence.checks and not evidence.rule_id


def test_a_binding_to_a_missing_attribute_fails():
    intro = introspect(qwen_norm())
    contract = derive_contract(intro)
    contract.bindings[0].attr = "scale"
    evidence = check_contract(contract, intro, ENTRY)
    assert not evidence.passed
    assert "binding weight -> scale" in evidence.error and "no attribute 'scale'" in evidence.error
    assert evidence.rule_id == "binding-missing"


def test_a_binding_of_the_wrong_kind_fails():
    intro = introspect(qwen_norm())
    contract = derive_contract(intro)
    contract.bindings[1].kind = "tensor"  # eps is a float on the live module
    evidence = check_contract(contract, intro, ENTRY)
    assert not evidence.passed and "not kind 'tensor'" in evidence.error and evidence.rule_id == "binding-kind"


def test_entrypoint_parameters_must_be_inputs_plus_bindings():
    intro = introspect(qwen_norm())
    contract = derive_contract(intro)
    evidence = check_contract(contract, intro, ["hidden_states", "weight", "eps", "residual"])
    assert not evidence.passed and "unexpected ['residual']" in evidence.error
    evidence = check_contract(contract, intro, ["hidden_states", "weight"])
    assert not evidence.passed and "missing ['eps']" in evidence.error and evidence.rule_id == "entry-signature"


def test_a_contract_for_another_class_or_an_unimportable_class_fails():
    intro = introspect(qwen_norm())
    contract = derive_contract(intro)
    contract.target = "transformers.models.llama.modeling_llama.LlamaRMSNorm"
    assert "but the live class is" in check_contract(contract, intro, ENTRY).error
    intro.class_path = contract.target = "nowhere.to.be.Found"
    assert "cannot import nowhere.to.be" in check_contract(contract, intro, ENTRY).error


class NormWithChild(torch.nn.Module):
    """An RMSNorm-shaped module that is not a leaf."""

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps
        self.post = torch.nn.Identity()

    def forward(self, hidden_states):
        return self.post(hidden_states)


def test_a_module_with_children_is_not_a_module_class():
    intro = introspect(NormWithChild(8))
    evidence = check_contract(derive_contract(intro), intro, ENTRY)
    assert not evidence.passed and "has child modules (post)" in evidence.error and evidence.rule_id == "not-leaf"
    assert "built NormWithChild of width 8 on meta" in evidence.checks


def test_the_entrypoint_is_the_family_wrapper_not_an_author_function():
    intro = introspect(qwen_norm())
    contract = derive_contract(intro)
    contract.entrypoint = "rmsnorm_forward"  # a wrapper of the author's own: there is none to call
    evidence = family_contract(row_reduction, contract, intro)
    assert evidence.rule_id == "entry-signature" and "'rmsnorm'" in evidence.error


def test_every_failure_names_a_contract_rule():
    intro = introspect(qwen_norm())
    contract = derive_contract(intro)
    wrong_kind = pb.Contract()
    wrong_kind.CopyFrom(contract)
    wrong_kind.kind = "layer_fusion"
    assert check_contract(wrong_kind, intro, ENTRY).rule_id == "contract-kind"
    wrong_inputs = pb.Contract()
    wrong_inputs.CopyFrom(contract)
    wrong_inputs.inputs.append("residual")
    assert check_contract(wrong_inputs, intro, ENTRY).rule_id == "contract-inputs"
    other = pb.Contract()
    other.CopyFrom(contract)
    other.target = "transformers.models.llama.modeling_llama.LlamaRMSNorm"
    assert check_contract(other, intro, ENTRY).rule_id == "contract-target"
    assert set(CONTRACT_RULES) >= {"contract-kind", "contract-inputs", "contract-target", "binding-not-state"}


def test_a_binding_must_name_state_set_in_init_not_a_method():
    intro = introspect(qwen_norm())
    intro.attributes.append(pb.ModuleAttribute(name="extra_repr", kind="tensor", shape=[64]))  # a lying record
    contract = derive_contract(intro)
    contract.bindings[0].attr = "extra_repr"
    evidence = check_contract(contract, intro, ENTRY)
    assert evidence.rule_id == "binding-not-state" and "not set in __init__" in evidence.error


def test_each_parameter_must_be_bound_as_the_kind_the_wrapper_takes():
    intro = introspect(qwen_norm())
    contract = derive_contract(intro)
    contract.bindings[1].kind = "tensor"
    evidence = check_contract(contract, intro, ENTRY, dict(row_reduction.PARAM_KINDS))
    assert not evidence.passed and evidence.rule_id in ("binding-kind", "entry-param-kind")
