"""Which model the server holds: named presets with seeded random weights, or a local checkpoint.

Over 400 lines, one file: most of it is the table of presets (each a real architecture's config at tiny or 1.5B
size); loading a checkpoint is the rest.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from services.server.tokenizer import ByteTokenizer, HFTokenizer, Tokenizer


def error_line(exc: BaseException, limit: int | None = None) -> str:
    """A model's own error in one line: its type and the first line of its message (cut at `limit` characters)."""
    lines = str(exc).splitlines()
    return f"{type(exc).__name__}: {(lines[0] if lines else '')[:limit]}"


class UnknownModel(ValueError):
    """The model name is neither a preset nor a checkpoint available locally."""


class UnservableModel(UnknownModel):
    """The checkpoint exists but is not a model the server can generate text from; the message says why."""


@dataclass
class LoadedModel:
    model: object  # a transformers PreTrainedModel, in eval mode
    tokenizer: Tokenizer
    name: str
    device: str  # "cuda" | "cpu"
    dtype: object  # torch.dtype

    @property
    def vocab_size(self) -> int:
        return int(self.model.config.vocab_size)

    @property
    def max_positions(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 0) or 1 << 20)


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cuda", "cpu") and not device.startswith("cuda:"):
        raise UnknownModel(f"device {device!r} is not one of auto, cpu, cuda")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UnknownModel(f"device {device!r} was asked for but no CUDA GPU is visible")
    return device


# Wide enough an init that a tiny model's greedy tokens vary (at the default 0.02 the tied embedding dominates
# and every preset repeats the prompt's last token, so "tokens equal" after a swap would prove little);
# the logits comparison stays the real gate.
TINY_INIT_RANGE = 0.3


def tiny_sizes() -> dict:
    """The tiny presets' sizes and init range, as config keyword arguments (tests build other architectures at them)."""
    return dict(
        initializer_range=TINY_INIT_RANGE,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=512,
        max_position_embeddings=512,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
    )


def _qwen_1p5b_shape() -> dict:
    return dict(
        hidden_size=1536,
        intermediate_size=8960,
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
        vocab_size=151936,
        max_position_embeddings=32768,
        rope_theta=1e6,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
    )


def _qwen2(kwargs: dict):
    from transformers import Qwen2Config

    return Qwen2Config(**kwargs)


def _qwen3(kwargs: dict):
    from transformers import Qwen3Config

    return Qwen3Config(head_dim=16, **kwargs)  # its q/k norms are per head: one norm class, two widths


def _gemma(kwargs: dict):
    from transformers import GemmaConfig

    return GemmaConfig(head_dim=16, **kwargs)  # its norm scales by (1 + weight)


def _cohere(kwargs: dict):
    from transformers import CohereConfig

    return CohereConfig(**kwargs)  # its LayerNorm has no bias and looks like an RMSNorm


def _gpt2(kwargs: dict):
    from transformers import GPT2Config

    return GPT2Config(
        n_embd=kwargs["hidden_size"], n_layer=kwargs["num_hidden_layers"], n_head=kwargs["num_attention_heads"],
        vocab_size=kwargs["vocab_size"], n_positions=kwargs["max_position_embeddings"],
        bos_token_id=0, eos_token_id=0, initializer_range=kwargs["initializer_range"],
    )  # fmt: skip


def _mistral(kwargs: dict):
    from transformers import MistralConfig

    return MistralConfig(**kwargs)  # a sliding window (4096) no slot outgrows


def _llama(kwargs: dict):
    from transformers import LlamaConfig

    return LlamaConfig(**kwargs)


def _starcoder2(kwargs: dict):
    from transformers import Starcoder2Config

    return Starcoder2Config(bos_token_id=0, eos_token_id=0, **kwargs)  # LayerNorms with a bias; a plain MLP


def _phi(kwargs: dict):
    from transformers import PhiConfig

    return PhiConfig(bos_token_id=0, eos_token_id=0, **kwargs)  # a parallel block; RoPE on half of each head


def _olmo2(kwargs: dict):
    from transformers import Olmo2Config

    return Olmo2Config(pad_token_id=0, bos_token_id=0, eos_token_id=0, **kwargs)  # norms after attention and MLP


def _phi3(kwargs: dict):
    from transformers import Phi3Config

    # gate and up fused in one projection (chunked), q/k/v fused too; pad 0 (its default id is past the vocab)
    return Phi3Config(pad_token_id=0, bos_token_id=0, eos_token_id=0, **kwargs)


def _glm(kwargs: dict):
    from transformers import GlmConfig

    # gate and up fused in one projection; RoPE over (even, odd) pairs of half of each head, the rest passed through
    # (the rotary family's rope_pairs_partial); its config's head_dim defaults to 128 whatever the width
    head_dim = kwargs["hidden_size"] // kwargs["num_attention_heads"]
    return GlmConfig(pad_token_id=0, bos_token_id=0, eos_token_id=0, head_dim=head_dim, **kwargs)


def _glm4(kwargs: dict):
    from transformers import Glm4Config

    # GLM's RoPE and fused MLP in a sandwich layer: norms after attention and after the MLP too, so its residual
    # adds feed no norm directly (no residual norm to fuse)
    head_dim = kwargs["hidden_size"] // kwargs["num_attention_heads"]
    return Glm4Config(pad_token_id=0, bos_token_id=0, eos_token_id=0, head_dim=head_dim, **kwargs)


def _gpt_neox(kwargs: dict):
    from transformers import GPTNeoXConfig

    # Pythia's shape: LayerNorms with a bias, a parallel block, a plain GELU MLP, RoPE on a quarter of each head
    # inside its function (the rest passed through)
    keep = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size",
            "max_position_embeddings", "initializer_range", "tie_word_embeddings")  # fmt: skip
    return GPTNeoXConfig(bos_token_id=0, eos_token_id=0, **{key: kwargs[key] for key in keep})


def _nemotron(kwargs: dict):
    from transformers import NemotronConfig

    # Nemotron's shape: a plain MLP with relu² (up -> relu² -> down), RoPE on half of each head inside its function,
    # LayerNorm1P norms ((1 + weight) with a bias: layernorm_offset, alone and in its layer's residual add)
    kwargs = {key: value for key, value in kwargs.items() if key != "rms_norm_eps"}
    return NemotronConfig(pad_token_id=0, bos_token_id=0, eos_token_id=0, **kwargs)


def _gemma4(kwargs: dict):
    from transformers import Gemma4TextConfig

    # Gemma 4's text model: RoPE in a function of one tensor (called for q, then k, each (batch, seq, heads, dim)),
    # q/k/v norms per head, a GELU-tanh gated MLP, sliding and full attention layers. Its own LM head: with the
    # embedding (scaled by sqrt(hidden)) tied to it, random weights predict the input token back (a canary that
    # repeats one token proves nothing)
    sizes = {**kwargs, "tie_word_embeddings": False}
    return Gemma4TextConfig(pad_token_id=0, bos_token_id=0, eos_token_id=0, head_dim=16, global_head_dim=16, **sizes)


def _granite(kwargs: dict):
    from transformers import GraniteConfig

    # Granite's scalings as its checkpoints set them: the residual add scales the attention output (0.22), so its
    # layer is no residual add a norm could fuse. Not its embedding multiplier (12): on random weights it drowns
    # the layers and greedy decoding repeats one token (a canary that proves nothing)
    return GraniteConfig(residual_multiplier=0.22, attention_multiplier=0.125, logits_scaling=8.0, **kwargs)


def _gemma3(kwargs: dict, window: int = 16, tied: bool = False):
    from transformers import Gemma3TextConfig

    # Gemma 3's text model: five sliding-window layers to one of full attention (the first four of five below the
    # tiny size's two layers: one of each), a window smaller than any slot so it binds, its own LM head (with the
    # embedding tied and scaled by sqrt(hidden), random weights predict the input token back; the 1.5B shape ties
    # them, as Gemma 3 does, to weigh what its full-attention peer weighs)
    layers = kwargs["num_hidden_layers"]
    kinds = ["full_attention" if (i + 1) % 6 == 0 or i == layers - 1 else "sliding_attention" for i in range(layers)]
    sizes = {**kwargs, "tie_word_embeddings": tied}
    head_dim = kwargs["hidden_size"] // kwargs["num_attention_heads"]
    return Gemma3TextConfig(pad_token_id=0, bos_token_id=0, eos_token_id=0, head_dim=head_dim, sliding_window=window,
                            layer_types=kinds, **sizes)  # fmt: skip


def _jamba(kwargs: dict, attention_every: int = 2, state: int = 8, expand: int = 2):
    from transformers import JambaConfig

    # Jamba's hybrid: Mamba layers (a causal conv and a selective-scan state) with one attention layer in each
    # `attention_every` (1:7 in Jamba; 1:1 in the tiny preset, whose two layers are one of each); one expert (a
    # plain gated MLP, not a mixture). Jamba's Mamba layers are twice as wide as the hidden size; the 1.5B shape's
    # are as wide (expand 1), so that it weighs what its full-attention peer weighs (1.59 B parameters to 1.54; at
    # expand 2, 1.78). Runs on transformers' own PyTorch scan where the mamba-ssm kernels are not installed
    return JambaConfig(
        pad_token_id=0, bos_token_id=0, eos_token_id=0, num_experts=1, num_experts_per_tok=1, expert_layer_period=1,
        expert_layer_offset=0, attn_layer_period=attention_every, attn_layer_offset=attention_every // 2,
        mamba_d_state=state, mamba_d_conv=4, mamba_expand=expand, **kwargs,
    )  # fmt: skip


def _falcon_h1(kwargs: dict, intermediate: int = 7168):
    from transformers import FalconH1Config

    # Falcon-H1's hybrid: attention and a Mamba-2 mixer side by side in every layer, their sum into the MLP. Mamba-2
    # as Falcon-H1 runs it: 64-wide heads as many as fill the hidden size, a 128-wide state, one group, chunks of 128
    # (transformers' own chunked PyTorch scan where the mamba-ssm kernels are not installed: a prefill is a few
    # large matmuls per chunk, not Jamba's loop over tokens). The MLP is narrower than Qwen's so that it weighs what
    # its full-attention peer weighs (1.52 B parameters to 1.54; at Qwen's 8,960, 1.75)
    heads = kwargs["num_attention_heads"]
    return FalconH1Config(
        pad_token_id=0, bos_token_id=0, eos_token_id=0, head_dim=kwargs["hidden_size"] // heads,
        mamba_d_ssm=kwargs["hidden_size"], mamba_n_heads=kwargs["hidden_size"] // 64, mamba_d_head=64,
        mamba_d_state=128, mamba_n_groups=1, mamba_d_conv=4, mamba_chunk_size=128,
        **{**kwargs, "intermediate_size": intermediate},
    )  # fmt: skip


# name -> (config builder, dtype on cuda). Tiny presets stay float32 everywhere so CPU and GPU agree on
# the arithmetic; the 1.5B shape is served in bf16 on a GPU as a real deployment would be.
PRESETS: dict[str, tuple[Callable[[], object], str]] = {
    "tiny-qwen2": (lambda: _qwen2(tiny_sizes()), "float32"),
    "tiny-llama": (lambda: _llama(tiny_sizes()), "float32"),
    "tiny-qwen3": (lambda: _qwen3(tiny_sizes()), "float32"),
    "tiny-gemma": (lambda: _gemma(tiny_sizes()), "float32"),
    "tiny-cohere": (lambda: _cohere(tiny_sizes()), "float32"),
    "tiny-gpt2": (lambda: _gpt2(tiny_sizes()), "float32"),
    "tiny-mistral": (lambda: _mistral(tiny_sizes()), "float32"),
    "tiny-starcoder2": (lambda: _starcoder2(tiny_sizes()), "float32"),
    "tiny-phi": (lambda: _phi(tiny_sizes()), "float32"),
    "tiny-olmo2": (lambda: _olmo2(tiny_sizes()), "float32"),
    "tiny-granite": (lambda: _granite(tiny_sizes()), "float32"),
    "tiny-phi3": (lambda: _phi3(tiny_sizes()), "float32"),
    "tiny-glm": (lambda: _glm(tiny_sizes()), "float32"),
    "tiny-glm4": (lambda: _glm4(tiny_sizes()), "float32"),
    "tiny-gptneox": (lambda: _gpt_neox(tiny_sizes()), "float32"),
    "tiny-nemotron": (lambda: _nemotron(tiny_sizes()), "float32"),
    "tiny-gemma4": (lambda: _gemma4(tiny_sizes()), "float32"),
    "tiny-gemma3": (lambda: _gemma3(tiny_sizes()), "float32"),
    "tiny-jamba": (lambda: _jamba(tiny_sizes()), "float32"),
    "qwen2.5-1.5b-shape": (lambda: _qwen2(_qwen_1p5b_shape()), "bfloat16"),
    # the batched lane's other layer kinds at the same shape: a 512-token sliding window (Gemma 3 1B's) in five
    # layers of six, Mamba layers with attention in one of eight (Jamba's ratio), and Mamba-2 beside attention in
    # every layer (Falcon-H1's); bench/served_inprocess.py compares their 16-stream throughput with
    # qwen2.5-1.5b-shape's
    "gemma3-1.5b-shape": (lambda: _gemma3(_qwen_1p5b_shape(), window=512, tied=True), "bfloat16"),
    "jamba-1.5b-shape": (lambda: _jamba(_qwen_1p5b_shape(), attention_every=8, state=16, expand=1), "bfloat16"),
    "falcon-h1-1.5b-shape": (lambda: _falcon_h1(_qwen_1p5b_shape()), "bfloat16"),
}
SEED = 0


def _perturb_norm_weights(model, seed: int) -> None:
    """Norm weights start at exactly 1.0 after random init, which would hide a kernel that forgets them.

    Trained checkpoints never have unit norm weights, so the presets get 1 + 0.1·N(0,1), seeded on the
    CPU generator so every device sees the same values.
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if "Norm" in type(module).__name__ and isinstance(weight, torch.nn.Parameter) and weight.dim() == 1:
            noise = torch.randn(weight.shape, generator=gen, dtype=torch.float32)
            with torch.no_grad():
                weight.copy_((1.0 + 0.1 * noise).to(weight.dtype))


def _load_preset(name: str, device: str) -> LoadedModel:
    import torch
    from transformers import AutoModelForCausalLM

    build_config, cuda_dtype = PRESETS[name]
    dtype = getattr(torch, cuda_dtype) if device.startswith("cuda") else torch.float32
    config = build_config()
    torch.manual_seed(SEED)
    with torch.device(device):  # initialise straight on the device: a 1.5B model builds in seconds
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    _perturb_norm_weights(model, SEED + 1)
    model.eval()
    return LoadedModel(model, ByteTokenizer(), name, device, dtype)


# Heads that generate text from a causal decoder (transformers' class names end so).
CAUSAL_HEADS = ("ForCausalLM", "LMHeadModel")


def causal_lm_problem(config) -> str | None:
    """Why a checkpoint's config is not a causal language model the server can generate from (None if it is):
    an encoder (BERT, a sentence encoder) loaded as a causal LM gets a randomly initialised head and decodes
    noise, which must be refused, never served."""
    archs = list(getattr(config, "architectures", None) or [])
    kind = getattr(config, "model_type", "?")
    if getattr(config, "is_encoder_decoder", False):
        return f"an encoder-decoder model ({kind}): the server decodes causal language models only"
    if archs and not any(a.endswith(CAUSAL_HEADS) for a in archs):
        return (
            f"a {', '.join(archs)} checkpoint ({kind}) has no causal language-model head: loaded as a text "
            "generator its head would be random weights. The server serves causal LMs (…ForCausalLM, "
            "…LMHeadModel) only"
        )
    return None


def _load_local(name: str, device: str) -> LoadedModel:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    try:
        config = AutoConfig.from_pretrained(name, local_files_only=True)
        problem = causal_lm_problem(config)
        if problem:
            raise UnservableModel(f"cannot serve {name!r}: {problem}")
        model, info = AutoModelForCausalLM.from_pretrained(
            name, local_files_only=True, dtype=dtype, output_loading_info=True
        )
        missing = sorted(info.get("missing_keys") or [])
        if missing:
            raise UnservableModel(
                f"cannot serve {name!r}: {len(missing)} weights are not in the checkpoint ({', '.join(missing[:3])}"
                f"{', …' if len(missing) > 3 else ''}); they would be random"
            )
        tok = AutoTokenizer.from_pretrained(name, local_files_only=True)
    except UnservableModel:
        raise
    except (OSError, ValueError, KeyError) as exc:
        presets = ", ".join(PRESETS)
        raise UnknownModel(
            f"unknown model {name!r}: not a preset ({presets}), not a local directory, and not in the local "
            f"Hugging Face cache ({error_line(exc)})"
        ) from exc
    model.to(device)
    model.eval()
    return LoadedModel(model, HFTokenizer(tok), name, device, dtype)


def check_model_name(name: str) -> None:
    """Raise UnknownModel for a name the server could not load, without loading anything.

    A preset, a local directory, or a hub id whose config is in the local cache passes; the server
    stays the authority (a cached config without weights still fails there). Lets `yantra up` and
    `yantra demo` refuse a mistyped name before they start six processes.
    """
    if name in PRESETS or (name and os.path.isdir(name)):
        return
    try:
        from huggingface_hub import try_to_load_from_cache

        if isinstance(try_to_load_from_cache(name, "config.json"), str):
            return
    except (ImportError, ValueError):  # not a valid repo id (HFValidationError is a ValueError): unknown
        pass
    presets = ", ".join(PRESETS)
    if not name:
        raise UnknownModel(f"no model named: choose a preset ({presets}) or a local checkpoint")
    raise UnknownModel(
        f"unknown model {name!r}: not a preset ({presets}), not a local directory, and not in the local "
        "Hugging Face cache (nothing is downloaded)"
    )


def load_model(name: str, device: str = "auto", *, packed_gqa: bool = True) -> LoadedModel:
    """Build a preset or load a local checkpoint, ready to serve; raises UnknownModel with the presets listed.
    `packed_gqa`: decode steps over grouped key/value heads attend without a copy per query head
    (services.server.gqa_decode, process-wide; YANTRA_PACKED_GQA=0 on the server keeps transformers' own)."""
    check_model_name(name)  # a name nothing could be loaded from fails here, before any loading
    dev = resolve_device(device)
    if dev == "cpu":
        # Triton kernels can only run interpreted without a GPU; the flag must be set before any
        # @triton.jit kernel is defined, i.e. before candidate modules are imported.
        os.environ.setdefault("TRITON_INTERPRET", "1")
        from services.core import interpreter_rounding, interpreter_scalars

        interpreter_rounding.install()  # bf16 casts round to nearest, as a GPU's do
        interpreter_scalars.install()  # a scalar's __index__ on every NumPy
    from services.server import gqa_decode

    gqa_decode.install(packed_gqa)
    if name in PRESETS:
        return _load_preset(name, dev)
    return _load_local(name, dev)
