"""Deriving the contract from a live module's introspection."""

from __future__ import annotations

import pytest
import torch
from transformers.models.llama.modeling_llama import LlamaRMSNorm
from transformers.models.qwen2.modeling_qwen2 import Qwen2RMSNorm

from services.ops.row_reduction.contract import ContractError, derive_contract
from services.server.introspection import introspect_module as introspect  # what the server records


@pytest.mark.parametrize("cls", [Qwen2RMSNorm, LlamaRMSNorm])
def test_rmsnorm_binds_weight_and_epsilon(cls):
    contract = derive_contract(introspect(cls(64)))
    assert contract.kind == "module_class"
    assert contract.target == f"{cls.__module__}.{cls.__qualname__}"
    assert contract.entrypoint == "rmsnorm"  # the row_reduction family's wrapper
    assert list(contract.inputs) == ["hidden_states"]
    assert [(b.param, b.attr, b.kind) for b in contract.bindings] == [
        ("weight", "weight", "tensor"),
        ("eps", "variance_epsilon", "float"),
    ]


def test_a_layer_norm_binds_its_bias_too_and_maps_its_input():
    contract = derive_contract(introspect(torch.nn.LayerNorm(64)))
    assert list(contract.inputs) == ["input"] and list(contract.entry_inputs) == ["hidden_states"]
    assert [(b.param, b.attr, b.kind) for b in contract.bindings] == [
        ("weight", "weight", "tensor"),
        ("eps", "eps", "float"),
        ("bias", "bias", "tensor"),
    ]


def test_a_module_of_two_weights_does_not_fit():
    class TwoWeights(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(64))
            self.scale = torch.nn.Parameter(torch.ones(64))
            self.eps = 1e-6

        def forward(self, hidden_states):
            return hidden_states * self.weight * self.scale

    with pytest.raises(ContractError, match="parameters weight, scale"):
        derive_contract(introspect(TwoWeights()))


def test_module_without_epsilon_does_not_fit():
    intro = introspect(Qwen2RMSNorm(64))
    del intro.attributes[1:]  # only the weight is left
    with pytest.raises(ContractError, match="no float epsilon"):
        derive_contract(intro)


def test_forward_with_other_inputs_does_not_fit():
    intro = introspect(Qwen2RMSNorm(64))
    intro.forward_params[:] = ["x", "residual"]
    with pytest.raises(ContractError, match=r"forward takes \(x, residual\)"):
        derive_contract(intro)
