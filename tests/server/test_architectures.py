"""Architectures beyond Qwen2/Llama, from configs (random weights): what the profile records and what swaps."""

from __future__ import annotations

import tempfile
from pathlib import Path

from services.coder.contract import derive_contract
from services.coder.templates import rmsnorm
from services.core.kernels import candidate_wrapper
from services.core.pb import events_pb2 as pb
from services.profiler.roofline import op_family
from services.server.engine import Engine
from services.server.models import load_model
from services.server.parity import swap_with_parity

QWEN3_NORM = "transformers.models.qwen3.modeling_qwen3.Qwen3RMSNorm"


async def test_qwen3s_norm_class_of_two_widths_is_recognised_and_swaps_on_both():
    """Qwen3RMSNorm serves per-head q/k norms (width 16 here, 128 in the real model) beside the hidden-size
    norms (64): the profile describes an instance of the width its dominant calls have, so the class is a
    row reduction; the kernel then serves every instance, and parity checks it at both widths."""
    engine = Engine(load_model("tiny-qwen3", "cpu"))
    try:
        observation = await engine.capture_profile(["Hello there"], 6)
        norm = next(m for m in observation.modules if m.introspection.class_path == QWEN3_NORM)
        weight = next(a for a in norm.introspection.attributes if a.name == "weight")
        assert list(weight.shape) == [norm.input_shape[-1]] == [64] and norm.instances == 9
        assert op_family(norm) == "row_reduction"

        widths = {call.args[0].shape[-1] for call in engine.live_inputs[QWEN3_NORM]}
        assert widths == {16, 64}  # parity will replay both
        config = rmsnorm.search_configs()[0]
        entry = candidate_wrapper(Path(tempfile.mkdtemp()), rmsnorm.render(config), rmsnorm.plan(config))
        observed = pb.ParityObservation()
        handle = await engine.exclusive(
            swap_with_parity, engine, derive_contract(norm.introspection), entry, engine.encode("Hello"), observed
        )
        assert handle is not None, observed.error
        assert observed.modules_matched == 9 and observed.activations_passed == observed.activations_checked > 9
        assert observed.profile_inputs_checked >= 2
        assert list(observed.canary_tokens_before) == list(observed.canary_tokens_after)
        await engine.exclusive(engine.revert, handle)
    finally:
        engine.close()
