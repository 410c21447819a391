"""Presets build deterministically from seeded random weights; unknown names fail with a useful message."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from services.server.engine import Engine
from services.server.models import PRESETS, UnknownModel, check_model_name, load_model
from services.server.tokenizer import ByteTokenizer, IncrementalText


@pytest.mark.parametrize(("name", "cls"), [("tiny-qwen2", "Qwen2ForCausalLM"), ("tiny-llama", "LlamaForCausalLM")])
def test_presets_build_and_decode_deterministically(name, cls):
    runs = []
    for _ in range(2):
        loaded = load_model(name, "cpu")
        assert type(loaded.model).__name__ == cls
        assert loaded.device == "cpu" and loaded.dtype == torch.float32 and not loaded.model.training
        assert loaded.vocab_size == 512 and loaded.max_positions == 512
        engine = Engine(loaded)
        tokens, _ = engine.decode(engine.encode("Hello, world"), 12)
        engine.close()
        runs.append((tokens, [p.detach().clone() for p in loaded.model.parameters()]))
    assert runs[0][0] == runs[1][0] and len(runs[0][0]) == 12
    assert all(torch.equal(a, b) for a, b in zip(runs[0][1], runs[1][1], strict=True))


def test_the_other_layer_kinds_at_the_1p5b_shape_weigh_what_the_full_attention_model_weighs():
    """bench/served_inprocess.py sets their throughput beside qwen2.5-1.5b-shape's: a fair ratio needs models of one
    size (built on the meta device: no weights made)."""
    from transformers import AutoModelForCausalLM

    def weight(name: str) -> int:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(PRESETS[name][0]())
        return sum(p.numel() for p in model.parameters())

    full = weight("qwen2.5-1.5b-shape")
    shaped = [p for p in PRESETS if p.endswith("-1.5b-shape") and p != "qwen2.5-1.5b-shape"]
    assert {"gemma3-1.5b-shape", "jamba-1.5b-shape", "falcon-h1-1.5b-shape"} <= set(shaped)
    for name in shaped:
        assert abs(weight(name) / full - 1) < 0.05, (name, weight(name), full)


def test_preset_norm_weights_are_not_all_ones():
    """A kernel that forgets the weight must be caught: unit norm weights would hide it."""
    model = load_model("tiny-qwen2", "cpu").model
    norms = [m for m in model.modules() if type(m).__name__ == "Qwen2RMSNorm"]
    assert len(norms) == 5
    assert all(not torch.allclose(m.weight, torch.ones_like(m.weight)) for m in norms)


def test_unknown_model_names_it_and_lists_presets():
    with pytest.raises(UnknownModel) as err:
        load_model("no-such-model-anywhere", "cpu")
    message = str(err.value)
    assert "no-such-model-anywhere" in message
    assert all(p in message for p in PRESETS)


def test_a_name_is_checked_without_loading_anything(tmp_path):
    for preset in PRESETS:
        check_model_name(preset)
    check_model_name(str(tmp_path))  # a local directory: the server decides whether it holds a checkpoint
    for bad in ("no-such-model-anywhere", "", "not/a/valid//repo id"):
        with pytest.raises(UnknownModel) as err:
            check_model_name(bad)
        assert all(p in str(err.value) for p in PRESETS)


def test_a_hub_id_passes_the_check_only_when_its_config_is_in_the_local_cache(tmp_path):
    snapshot = tmp_path / "models--acme--tiny" / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (tmp_path / "models--acme--tiny" / "refs").mkdir()
    (tmp_path / "models--acme--tiny" / "refs" / "main").write_text("0123abc")
    code = "from services.server.models import check_model_name as c; c('acme/tiny'); c('acme/other')"
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path), "HF_HUB_OFFLINE": "1"}  # read when the hub imports
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "UnknownModel: unknown model 'acme/other'" in result.stderr, result.stderr


def test_bad_device_is_a_clear_error():
    with pytest.raises(UnknownModel, match="tpu"):
        load_model("tiny-qwen2", "tpu")


def test_byte_tokenizer_round_trips_and_prints_other_ids():
    tok = ByteTokenizer()
    text = "héllo ✓"
    assert tok.decode(tok.encode(text)) == text
    assert tok.decode([104, 300, 105]) == "h<300>i"
    stream = IncrementalText(tok)
    pieces = [stream.push([b]) for b in "é!".encode()]
    assert pieces == ["", "é", "!"]  # the first byte of é is held back, not sent as garbage
    assert stream.flush() == ""


def test_an_encoder_checkpoint_is_refused_not_served_with_a_random_head(tmp_path):
    """A BERT-style sentence encoder given as a local directory: AutoModelForCausalLM would load it with a random
    LM head and the server would decode noise; it is refused, saying what it is."""
    from transformers import BertConfig, BertModel

    from services.server.models import UnservableModel, load_model

    config = BertConfig(
        vocab_size=120, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
    )
    BertModel(config).save_pretrained(tmp_path / "encoder")
    with pytest.raises(UnservableModel, match="BertModel checkpoint .* has no causal language-model head"):
        load_model(str(tmp_path / "encoder"), "cpu")


def test_a_causal_checkpoint_missing_its_head_is_refused(tmp_path):
    """The config says Qwen2ForCausalLM but only the base model's weights are there: the head would be random."""
    from transformers import Qwen2Config, Qwen2Model

    from services.server.models import UnservableModel, load_model

    config = Qwen2Config(
        vocab_size=128, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
        intermediate_size=64, tie_word_embeddings=False, architectures=["Qwen2ForCausalLM"],
    )  # fmt: skip
    Qwen2Model(config).save_pretrained(tmp_path / "headless")
    path = tmp_path / "headless" / "config.json"  # saving wrote the base class back: claim the causal LM again
    path.write_text(path.read_text().replace('"Qwen2Model"', '"Qwen2ForCausalLM"'))
    with pytest.raises(UnservableModel, match="lm_head.weight"):
        load_model(str(tmp_path / "headless"), "cpu")


def test_a_models_error_is_one_line_even_without_a_message():
    """What the load probes (a lane that cannot take the model, a model that cannot decode) and an unknown model's
    refusal say of the model's own error: its type and its message's first line, cut where asked; an error with no
    message is its type alone (the lane probe's own formatting raised IndexError on one, failing the load)."""
    from services.server.models import error_line

    assert error_line(ValueError("too many values\nTraceback follows")) == "ValueError: too many values"
    assert error_line(RuntimeError("x" * 300), 200) == "RuntimeError: " + "x" * 200
    assert error_line(IndexError()) == "IndexError: "
