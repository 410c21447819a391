"""The judge draws the served model's input domain from the profile, not the sample the capture happened to send:
every width a class is called at, the served model's whole row range on a GPU, and on CPU no plan whose dispatch
lies above what the interpreter runs."""

from __future__ import annotations

import dataclasses
import math

import torch

from services.judge.cases import (
    CPU_BOUNDARY_ROWS,
    CPU_ROW_BUDGET,
    DOMAIN_ELEMENTS,
    GPU_ELEMENT_BUDGET,
    MAX_DRAWN_ROWS,
    CaseSpec,
    domain_rows,
    draw_cases,
    undrawn_boundaries,
)

BF16 = torch.bfloat16
CPU = CaseSpec(width=64, live_shape=(2, 3, 64), input_dtype=BF16, param_dtype=BF16, gpu=False, max_rows=8)
GPU = CaseSpec(width=1536, live_shape=(1, 1, 1536), input_dtype=BF16, param_dtype=BF16, gpu=True)
SERVED_ROWS = 64 * 2048  # a batched prefill of 64 slots of 2,048 tokens


def rows(shape) -> int:
    return math.prod(shape[:-1])


def test_every_width_the_class_is_called_at_is_drawn_on_cpu_and_gpu():
    for spec in (CPU, GPU):
        widths = (spec.width, 128, 8960)
        cases = draw_cases(dataclasses.replace(spec, widths=widths), seed=3)
        drawn = {c.width for c in cases if c.name.startswith("width ")}
        assert drawn == {128, 8960}  # the live width and the odd one have cases of their own already
        assert all(c.weight.shape == (c.width,) for c in cases)
    assert sum(rows(c.shape) for c in draw_cases(dataclasses.replace(CPU, widths=(64, 128)), 3)) <= CPU_ROW_BUDGET


def test_a_gpu_draws_the_served_row_range_up_to_its_maximum():
    cases = draw_cases(dataclasses.replace(GPU, domain_rows=SERVED_ROWS), seed=5)
    domain = [rows(c.shape) for c in cases if c.name.startswith("domain ")]
    top = DOMAIN_ELEMENTS // 1536  # 131,072 rows of 1,536 are past one case's elements: the most that fit
    assert max(domain) == top and len(domain) == 3 and domain == sorted(domain)
    assert all(n % 2 for n in domain[:-1]) and domain[0] > 1  # odd: a ragged last block of any power of two
    # the domain's cases are outside the drawn cases' budget: those keep their rows
    drawn = [c for c in cases if c.name.startswith("drawn")]
    assert max(rows(c.shape) for c in drawn) > 1
    assert sum(c.base.numel() for c in cases if not c.name.startswith("domain ")) <= GPU_ELEMENT_BUDGET
    assert max(rows(c.shape) for c in drawn) <= MAX_DRAWN_ROWS
    # a narrow op reaches the maximum itself
    narrow = draw_cases(dataclasses.replace(GPU, width=128, live_shape=(1, 1, 128), domain_rows=SERVED_ROWS), 5)
    assert max(rows(c.shape) for c in narrow) == SERVED_ROWS


def test_the_cpu_and_an_unknown_domain_draw_no_domain_cases():
    assert not [c for c in draw_cases(dataclasses.replace(CPU, domain_rows=SERVED_ROWS), 5) if "domain" in c.name]
    assert not [c for c in draw_cases(GPU, 5) if c.name.startswith("domain ")]
    assert domain_rows(4096, 4096, 64) == [] and domain_rows(1, 0, 64) == []


def test_on_cpu_a_dispatch_above_what_the_interpreter_runs_is_refused():
    assert undrawn_boundaries([0], gpu=False) == ""
    assert undrawn_boundaries([64, 0], gpu=False) == ""  # both sides drawn
    why = undrawn_boundaries([4096, 0], gpu=False)
    assert "4096" in why and str(CPU_BOUNDARY_ROWS) in why and "GPU" in why
    assert undrawn_boundaries([4096, 0], gpu=True) == ""  # a GPU draws both sides of every boundary
    assert "64" in undrawn_boundaries([64, 0], gpu=False, cpu_limit=64)  # RoPE's positions: 64 is not run


def test_rope_draws_other_kv_head_counts_a_served_batch_and_a_sequence_near_the_longest():
    from services.judge.rope_cases import DOMAIN_ELEMENTS as ROPE_ELEMENTS
    from services.judge.rope_cases import RopeSpec, draw_rope_cases, other_kv_heads

    assert other_kv_heads(12) == [2, 4] and other_kv_heads(2) == [] and other_kv_heads(32) == [2, 8]
    kinds = lambda cases: {c.name.split()[0]: c for c in cases}  # noqa: E731
    cpu = kinds(draw_rope_cases(RopeSpec((1, 12, 5, 64), BF16, False, max_positions=32768, max_batch=64), "", 1))
    assert {c.heads_k for c in draw_rope_cases(RopeSpec((1, 12, 5, 64), BF16, False), "", 1)} >= {1, 2, 4, 6, 12}
    assert "domain" not in cpu and "batch" not in cpu  # the interpreter: a few positions
    gpu = kinds(draw_rope_cases(RopeSpec((1, 12, 1, 128), BF16, True, max_positions=32768, max_batch=64), "", 1))
    assert gpu["batch"].shape[0] == 64
    assert gpu["domain"].shape == (1, 12, min(32768, ROPE_ELEMENTS // (12 * 128)), 128)
    unknown = kinds(draw_rope_cases(RopeSpec((1, 12, 1, 128), BF16, True), "", 1))
    assert "domain" not in unknown and "batch" not in unknown
