"""What an MLP computes, found by running it: the gated ones (SwiGLU, GeGLU) whatever their names, and
nothing for MLPs that are not gated or gate otherwise."""

from __future__ import annotations

import pytest
import torch
from transformers import GemmaConfig, LlamaConfig
from transformers.models.gemma.modeling_gemma import GemmaMLP
from transformers.models.llama.modeling_llama import LlamaMLP

from services.ops import recognise
from services.ops.gated_mlp import recognise as recognise_gated
from services.ops.gated_mlp import roles

SMALL = dict(hidden_size=32, intermediate_size=64)


class Renamed(torch.nn.Module):
    """A SwiGLU whose maps are named nothing like gate/up/down, declared in another order."""

    def __init__(self, act=torch.nn.functional.silu):
        super().__init__()
        self.out = torch.nn.Linear(64, 32, bias=False)
        self.b = torch.nn.Linear(32, 64, bias=False)  # the up projection
        self.a = torch.nn.Linear(32, 64, bias=False)  # the gate
        self.act = act

    def forward(self, h):
        return self.out(self.act(self.a(h)) * self.b(h))


class Ungated(torch.nn.Module):
    """Three maps, but a plain MLP with a residual branch: not act(gate) * up."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(32, 64)
        self.b = torch.nn.Linear(32, 64)
        self.c = torch.nn.Linear(64, 32)

    def forward(self, h):
        return self.c(torch.relu(self.a(h)) + self.b(h))


def test_hf_gated_mlps_are_named_for_their_activation():
    assert recognise(LlamaMLP(LlamaConfig(**SMALL))) == ("gated_mlp", "swiglu")
    assert recognise(GemmaMLP(GemmaConfig(**SMALL, hidden_activation="gelu_pytorch_tanh"))) == (
        "gated_mlp",
        "geglu_tanh",
    )


def test_the_gate_is_found_by_running_not_by_name():
    module = Renamed()
    assert set(roles(module)[:2]) == {"a", "b"} and roles(module)[2] == "out"
    assert recognise_gated(module) == "swiglu"
    assert recognise_gated(Renamed(act=lambda t: torch.nn.functional.gelu(t, approximate="tanh"))) == "geglu_tanh"


@pytest.mark.parametrize(
    "module",
    [Ungated(), Renamed(act=torch.relu), torch.nn.Linear(32, 32), torch.nn.LayerNorm(32)],
    ids=["ungated", "relu-gated", "linear", "layernorm"],
)
def test_what_is_not_a_silu_or_gelu_gate_is_not_recognised(module):
    assert recognise_gated(module) is None


class FusedUpFirst(torch.nn.Module):
    """One map to [up | gate] (the other order than Phi-3's): recognised by no form the rewrite runs."""

    def __init__(self):
        super().__init__()
        self.gate_up_proj = torch.nn.Linear(32, 128, bias=False)
        self.down_proj = torch.nn.Linear(64, 32, bias=False)

    def forward(self, h):
        up, gate = self.gate_up_proj(h).chunk(2, dim=-1)
        return self.down_proj(torch.nn.functional.silu(gate) * up)


class NotPlainLinear(torch.nn.Linear):
    """A map whose forward is not its weight (as a quantised or adapted one's may not be)."""


def test_a_fused_gate_up_projection_is_a_gated_mlp_of_two_roles():
    from transformers import Phi3Config
    from transformers.models.glm.configuration_glm import GlmConfig
    from transformers.models.glm.modeling_glm import GlmMLP
    from transformers.models.phi3.modeling_phi3 import Phi3MLP

    from services.ops import gated_mlp

    phi3 = Phi3MLP(Phi3Config(**SMALL, hidden_act="silu"))
    assert recognise(phi3) == ("gated_mlp", "swiglu")
    assert gated_mlp.roles_of(phi3) == {"gate_up_proj": "gate_up_proj", "down_proj": "down_proj"}
    assert recognise(GlmMLP(GlmConfig(**SMALL, hidden_act="silu"))) == ("gated_mlp", "swiglu")
    assert recognise_gated(FusedUpFirst()) is None and gated_mlp.roles_of(FusedUpFirst()) == {}
    wrapped = Phi3MLP(Phi3Config(**SMALL, hidden_act="silu"))
    wrapped.gate_up_proj = NotPlainLinear(32, 128, bias=False)
    assert recognise_gated(wrapped) is None


def test_the_fused_forms_roles_are_checked_by_shape():
    from services.ops import gated_mlp

    assert gated_mlp.roles_problem({"gate_up_proj": (128, 32), "down_proj": (32, 64)}) == ""
    assert gated_mlp.intermediate_width({"gate_up_proj": (128, 32), "down_proj": (32, 64)}) == 64
    assert "twice the intermediate" in gated_mlp.roles_problem({"gate_up_proj": (64, 32), "down_proj": (32, 64)})
    assert "binds gate_up_proj and down_proj" in gated_mlp.roles_problem(
        {"gate_up_proj": (128, 32), "down_proj": (32, 64), "up_proj": (64, 32)}
    )


class FusedWithBiases(torch.nn.Module):
    """A fused gate_up map with a bias, its intermediate as wide as the hidden width (unambiguous all the same)."""

    def __init__(self):
        super().__init__()
        self.gate_up_proj = torch.nn.Linear(32, 64)
        self.down_proj = torch.nn.Linear(32, 32)

    def forward(self, h):
        gate, up = self.gate_up_proj(h).chunk(2, dim=-1)
        return self.down_proj(torch.nn.functional.silu(gate) * up)


def test_the_fused_rewrite_runs_the_weights_halves_with_their_biases_as_the_module_does(tmp_path):
    from services.core.kernels import bind, candidate_wrapper
    from services.ops import gated_mlp
    from services.ops.gated_mlp import template as gated

    module = FusedWithBiases()
    contract = gated_mlp.contract_for(module, "tests.FusedWithBiases")
    assert [b.param for b in contract.bindings] == list(gated_mlp.FUSED_ROLES)
    config = gated.search_configs("swiglu")[0]
    call = bind(contract, candidate_wrapper(tmp_path, gated.render(config), gated.plan(config)))
    x = torch.randn(3, 5, 32)
    assert torch.allclose(call(module, (x,), {}), module(x), atol=1e-5)
