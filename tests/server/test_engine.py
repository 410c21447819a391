"""The engine serving a real tiny Qwen2: streaming decode, concurrency, measurement and profile capture."""

from __future__ import annotations

import asyncio

import pytest
from server_fixtures import QWEN_NORM

from services.server.batching import END
from services.server.engine import BadRequest, take_ready
from services.server.introspection import class_path, forward_params, import_class


async def _collect(engine, ids, n):
    chunks = [chunk async for chunk in engine.generate(ids, n)]
    return chunks


async def test_generate_streams_the_tokens_of_greedy_decode_as_they_come(engine):
    ids = engine.encode("The quick brown fox")
    chunks = await _collect(engine, ids, 10)
    assert chunks and all(chunks) and sum(map(len, chunks)) == 10  # one a step, or what piled up meanwhile
    expected, _ = await engine.exclusive(engine.decode, ids, 10)
    assert [t for c in chunks for t in c] == expected


async def test_a_reader_that_falls_behind_gets_what_piled_up_in_one_chunk_and_then_the_end():
    queue: asyncio.Queue = asyncio.Queue()
    for item in ([4], [5], [6], END):
        queue.put_nowait(item)
    assert take_ready(queue.get_nowait(), queue) == ([4, 5, 6], END)
    failure = RuntimeError("step failed")
    for item in ([7], failure, [8]):
        queue.put_nowait(item)
    assert take_ready(queue.get_nowait(), queue) == ([7], failure)  # what came after a failure is never read
    queue.get_nowait()
    tokens, more = take_ready([9], queue)
    assert tokens == [9] and more is not END and not isinstance(more, BaseException)  # the stream goes on


async def test_concurrent_requests_interleave_without_changing_tokens(engine):
    """The same tokens together as alone (how they are grouped into chunks depends on when the reader reads)."""

    def tokens(chunks):
        return [t for c in chunks for t in c]

    prompts = [engine.encode(p) for p in ("alpha", "a much longer prompt here", "z")]
    alone = [tokens(await _collect(engine, ids, 6)) for ids in prompts]
    served = engine.stats.requests_served
    together = await asyncio.gather(*(_collect(engine, ids, 6) for ids in prompts))
    assert [tokens(chunks) for chunks in together] == alone and all(len(t) == 6 for t in alone)
    assert engine.stats.requests_served == served + 3


@pytest.mark.parametrize(
    ("ids", "max_new", "why"),
    [([], 4, "empty"), ([1, 2], 0, "max_new_tokens"), ([1, 2], 5000, "max_new_tokens"), ([1, 512], 4, "outside")],
)
def test_bad_requests_are_refused_with_the_reason(engine, ids, max_new, why):
    with pytest.raises(BadRequest, match=why):
        engine.check(ids, max_new)


def test_a_request_longer_than_the_model_is_refused(engine):
    with pytest.raises(BadRequest, match="positions"):
        engine.check([1] * 500, 20)


async def test_measure_decode_counts_every_token(engine):
    m = await engine.measure_decode(["hello", "world"], 5, repeats=2)
    assert m.tokens == 2 * 2 * 5 and m.seconds > 0 and m.tokens_per_s > 0


async def test_capture_profile_covers_every_class_with_live_numbers(engine):
    prompts, n = ["Hello there", "profile me"], 6
    obs = await engine.capture_profile(prompts, n)
    classes = {class_path(m) for m in engine.model.modules()}
    functions = {"transformers.models.qwen2.modeling_qwen2.apply_rotary_pos_emb"}  # the RoPE function, timed too
    assert {m.introspection.class_path for m in obs.modules} == classes | functions
    assert obs.requests == 2 and obs.tokens_generated == 2 * n
    assert obs.captured_time_us > 0 and obs.decode_tokens_per_s > 0
    assert obs.time_source == "host_clock" and obs.model == "tiny-qwen2" and obs.dtype == "float32"
    assert obs.hardware.calibrated and obs.hardware.peak_bytes_per_s > 0 and obs.hardware.peak_flops > 0

    norm = next(m for m in obs.modules if m.introspection.class_path == QWEN_NORM)
    forward_passes = 2 * n  # a prefill and n-1 decode steps per request
    assert norm.instances == 5 and norm.calls == 5 * forward_passes
    assert norm.total_time_us > 0
    assert list(norm.input_shape) == [1, 1, 64]  # decode steps outnumber prefills
    assert list(norm.widths) == [64]
    linear_widths = next(m.widths for m in obs.modules if m.introspection.class_path.endswith("linear.Linear"))
    assert set(linear_widths) > {64}  # one class, called at the hidden and the intermediate widths
    # the server's input domain, from its limits: a batched prefill of every slot at its longest, or one request of
    # the model's maximum positions
    slots, slot_len = engine.decoder.slots, engine.decoder.max_len
    positions = engine.loaded.max_positions
    assert (obs.max_positions, obs.max_batch) == (positions, slots)
    assert obs.max_rows_per_call == max(slots * slot_len, positions) > 0
    assert norm.dtype == "float32" and norm.param_bytes == 64 * 4
    assert norm.input_bytes == norm.output_bytes > 64 * 4  # mean over calls: prefills are wider
    intro = norm.introspection
    assert intro.leaf and list(intro.forward_params) == ["hidden_states"]
    attrs = {a.name: a for a in intro.attributes}
    assert attrs["weight"].kind == "parameter" and list(attrs["weight"].shape) == [64]
    assert attrs["weight"].dtype == "float32"
    assert attrs["variance_epsilon"].kind == "float" and attrs["variance_epsilon"].value == pytest.approx(1e-6)

    root = next(m for m in obs.modules if m.introspection.class_path.endswith("Qwen2ForCausalLM"))
    assert root.calls == forward_passes and not root.introspection.leaf
    assert root.total_time_us >= norm.total_time_us  # inclusive time: the root contains every norm
    linear = next(m for m in obs.modules if m.introspection.class_path == "torch.nn.modules.linear.Linear")
    assert linear.instances == 15 and {a.name for a in linear.introspection.attributes} >= {"weight", "in_features"}


def test_class_paths_import_back_and_forward_params_skip_self(engine):
    for module in engine.model.modules():
        assert import_class(class_path(module)) is type(module)
    assert forward_params(import_class(QWEN_NORM)) == ["hidden_states"]
    with pytest.raises(ImportError, match="no.such"):
        import_class("no.such.Class")


def test_module_state_reports_instances_and_patches(engine):
    intro, instances, patched = engine.module_state(QWEN_NORM)
    assert intro.class_path == QWEN_NORM and instances == 5 and patched == 0
    assert engine.module_state("nowhere.Nothing") is None
