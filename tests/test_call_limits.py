"""The per-call time limit the judge and the server share (services.core.call_limits): pure arithmetic."""

from __future__ import annotations

import pytest

from services.core.call_limits import (
    CPU_FLOOR_S,
    CPU_SLOW_BYTES_PER_S,
    GPU_COMPILE_FLOOR_S,
    GPU_SLOW_BYTES_PER_S,
    GPU_WARM_FLOOR_S,
    call_bytes,
    call_limit_s,
    describe,
)


def test_small_calls_get_the_floor_large_ones_time_in_proportion_to_their_bytes():
    assert call_limit_s(3584, "cpu") == CPU_FLOOR_S  # a judge's CPU case: a few kB
    big = 2048 * 1536 * 2 * 2  # a bf16 prefill, read and written
    assert call_limit_s(big, "cpu") == pytest.approx(big / CPU_SLOW_BYTES_PER_S)
    assert call_limit_s(2 * big, "cpu") == pytest.approx(2 * call_limit_s(big, "cpu"))
    assert call_limit_s(1536 * 4, "cuda") == GPU_COMPILE_FLOOR_S
    assert call_limit_s(1536 * 4, "cuda:1", may_compile=False) == GPU_WARM_FLOOR_S
    huge = 32 * (1 << 30)
    assert call_limit_s(huge, "cuda", may_compile=False) == pytest.approx(huge / GPU_SLOW_BYTES_PER_S)


def test_honest_figures_stay_far_under_the_limit():
    # the slowest honest kernel timed on the H200: one program walking 32768 rows, ~200 MB in ~41 ms
    assert call_limit_s(200e6, "cuda", may_compile=False) > 40 * 0.041
    # the corpus's 32-column chunked kernel under the interpreter: 64 x 1536 bf16 rows in up to 20 s
    assert call_limit_s(64 * 1536 * 2 * 2 + 1536 * 2, "cpu") > 5 * 20


def test_negative_bytes_are_refused():
    with pytest.raises(ValueError):
        call_limit_s(-1, "cpu")


def test_bytes_count_what_is_read_and_written():
    assert call_bytes([100, 20], [100]) == 220
    assert call_bytes([100, 20]) == 240  # outputs unknown: as much written as read


def test_a_late_call_is_named_with_its_shape_and_limit():
    text = describe("case 3", "2x3x64", 3584, 20.0)
    assert text == "case 3 at 2x3x64 was still running at its per-call limit of 20.0 s (3.6 kB moved)"
    assert "ran 25.0 s, past its per-call limit" in describe("case 3", "2x3x64", 3584, 20.0, 25.0)
