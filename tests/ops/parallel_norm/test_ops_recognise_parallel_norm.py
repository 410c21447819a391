"""What the parallel-norm family recognises, by running the layer: GPT-NeoX's parallel-residual layer (both norms fed
the layer's input) with its four roles, through the registry too; not its sequential form (the residual norm's), not
a parallel block with one norm (Cohere's), not a layer whose norms read different inputs, nor one whose norms differ
in epsilon, nor one whose dropout drops."""

from __future__ import annotations

import torch
from transformers import CohereConfig, GPTNeoXConfig
from transformers.models.cohere.modeling_cohere import CohereDecoderLayer
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXLayer
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from services import ops
from services.ops import parallel_norm, residual_norm
from services.server.introspection import class_path
from services.server.models import load_model

HIDDEN = 32
NEOX_ROLES = {
    "input_norm": "input_layernorm", "attention": "attention", "post_norm": "post_attention_layernorm", "mlp": "mlp"
}  # fmt: skip


def _neox(parallel: bool = True, dropout: float = 0.0) -> GPTNeoXLayer:
    config = GPTNeoXConfig(
        hidden_size=HIDDEN, intermediate_size=64, num_attention_heads=4, num_hidden_layers=1,
        use_parallel_residual=parallel, hidden_dropout=dropout,
    )  # fmt: skip
    return GPTNeoXLayer(config, layer_idx=0).eval()


def test_tiny_gptneoxs_layers_are_recognised_with_their_roles_through_the_registry():
    model = load_model("tiny-gptneox", "cpu").model
    layers = [m for m in model.modules() if class_path(m).endswith("GPTNeoXLayer")]
    assert len(layers) == 2
    for layer in layers:
        assert parallel_norm.identify(layer) == ("dual_layernorm", NEOX_ROLES)
        assert ops.recognise(layer) == ("parallel_norm", "dual_layernorm")
        assert parallel_norm.layer_shaped(layer) and ops.rewrites_layer(layer)
    assert ops.family_of("dual_layernorm") == "parallel_norm"


def test_the_sequential_layer_is_the_residual_norms_not_this_familys():
    layer = _neox(parallel=False)
    assert parallel_norm.recognise(layer) is None
    assert ops.recognise(layer) == ("residual_norm", "add_layernorm")


def test_a_parallel_block_with_one_norm_is_not_recognised():
    config = CohereConfig(hidden_size=HIDDEN, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2)
    layer = CohereDecoderLayer(config, layer_idx=0).eval()
    assert parallel_norm.recognise(layer) is None and parallel_norm.roles_of(layer) == {}


class _TwoInputs(torch.nn.Module):
    """Two LayerNorms, an attention and an MLP, added as a parallel layer adds them, but its post norm reads the
    attention's output and the input summed: two norms of two hidden states."""

    def __init__(self):
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = torch.nn.LayerNorm(HIDDEN), torch.nn.LayerNorm(HIDDEN)
        self.attention, self.mlp = torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.Linear(HIDDEN, HIDDEN)

    def forward(self, hidden_states):
        attended = self.attention(self.input_layernorm(hidden_states))
        return self.mlp(self.post_attention_layernorm(hidden_states + attended)) + attended + hidden_states


def test_a_layer_whose_norms_read_different_inputs_is_not_recognised():
    layer = _TwoInputs().eval()
    assert parallel_norm.layer_shaped(layer)  # shaped like one: only running it tells
    assert parallel_norm.recognise(layer) is None


def test_norms_of_two_epsilons_are_not_one_op():
    layer = _neox()
    layer.post_attention_layernorm.eps = 1e-3
    assert parallel_norm.recognise(layer) is None


def test_a_dropout_that_drops_is_no_match_and_the_identity_one_is():
    layer = _neox(dropout=0.5)
    assert parallel_norm.recognise(layer.eval()) == "dual_layernorm"
    assert parallel_norm.recognise(layer.train()) is None


def test_a_parallel_layer_of_two_rmsnorms_is_dual_rmsnorm():
    layer = _neox()
    layer.input_layernorm, layer.post_attention_layernorm = LlamaRMSNorm(HIDDEN, 1e-6), LlamaRMSNorm(HIDDEN, 1e-6)
    assert parallel_norm.identify(layer) == ("dual_rmsnorm", NEOX_ROLES)
    assert residual_norm.recognise(layer) is None
