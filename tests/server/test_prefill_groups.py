"""A burst of joins past one prefill graph, replayed as graph-sized groups (`prefill_groups`), gives each prompt the
logits one eager join gives it, in the slots it was given.

On a CPU no graph is captured, so each group runs the prefill graph's own forward eagerly through its static
buffers (the path a replay takes where no graph may run): the grouping itself — which prompts, slots and last
positions each group carries — is what is checked, against the one eager join of the same prompts.
"""

from __future__ import annotations

import torch

from services.server.batch_decode import PREFILL_GRAPH_ROWS, SlotDecoder

PROMPTS = [[(7 * i + j) % 200 + 1 for j in range(5 + 3 * i)] for i in range(10)]  # 10 prompts of 5..32 tokens


def _decoder(engine, groups: int) -> SlotDecoder:
    decoder = SlotDecoder(engine.model, "cpu", engine.loaded.dtype, 12, 64, engine._cache_kw, prefill_groups=groups)
    decoder.graphs = True  # as on a GPU: the join's path is decided as there; no graph exists, so each runs eagerly
    return decoder


def test_a_join_past_one_graph_goes_in_groups_only_when_allowed_and_every_prompt_fits_a_graph(engine):
    grouped, single = _decoder(engine, 3), _decoder(engine, 1)
    assert grouped.prefill_path(PROMPTS[:9]) == "graph groups"  # 3 groups of at most 4
    assert single.prefill_path(PROMPTS[:9]) == "eager"
    assert grouped.prefill_path((PROMPTS * 2)[: 3 * PREFILL_GRAPH_ROWS + 1]) == "eager"  # 4 groups: past the 3
    assert grouped.prefill_path(PROMPTS[:PREFILL_GRAPH_ROWS]) == "graph"  # one graph holds it: no groups
    assert grouped.prefill_path([[1] * 63, *PROMPTS[:5]]) == "eager"  # 63 tokens: past the 64-token slots' graphs


def test_grouped_prompts_get_the_logits_of_one_eager_join_in_their_own_slots(engine):
    slots = [11, 3, 7, 0, 5, 9, 1, 10, 2, 6]  # not in order: each group must carry its own
    grouped, eager = _decoder(engine, 3), _decoder(engine, 1)
    got = grouped.prefill_many(slots, PROMPTS)
    want = eager.prefill_many(slots, PROMPTS)
    assert len(got) == len(want) == len(PROMPTS)
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        # fp32, padded to another length (a group's longest, not the join's): within rounding of the logits' scale
        torch.testing.assert_close(a.float(), b.float(), rtol=0, atol=1e-4 * float(b.abs().max()), msg=f"prompt {i}")
    assert grouped.lengths == eager.lengths and grouped.busy == eager.busy
    # the caches agree: one step of every slot from the two decoders gives the same next logits
    feeds = {s: PROMPTS[i][-1] for i, s in enumerate(slots)}
    torch.testing.assert_close(grouped.step(feeds), eager.step(feeds), rtol=0, atol=1e-3)
