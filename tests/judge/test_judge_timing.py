"""Timing rules that need no GPU: what gets flagged and re-measured, and what is not believed.

The measurements themselves run on a GPU (tests/judge/test_judge_gpu.py, bench/judge_corpus.py).
"""

from __future__ import annotations

import pytest

from services.core.pb import events_pb2 as pb
from services.judge.timing import flag


def _row(candidate, eager, compile_=0.0, native=0.0, floor=0.0) -> pb.TimingRow:
    return pb.TimingRow(
        shape="32768x1536",
        candidate_us=candidate,
        eager_us=eager,
        compile_us=compile_,
        native_us=native,
        floor_us=floor,
    )


def _never() -> float:
    raise AssertionError("an unremarkable row must not be re-measured")


def test_an_ordinary_row_is_left_alone():
    row = _row(53.0, 663.0 / 2, 68.6, 65.2, floor=49.6)
    flag(row, _never)
    assert not row.remeasured and not row.flag and row.candidate_us == 53.0


def test_over_ten_times_faster_is_re_measured_and_the_slower_figure_kept():
    row = _row(53.0, 663.0, 68.6, 65.2, floor=49.6)
    flag(row, lambda: 55.0)
    assert row.remeasured and row.candidate_us == 55.0
    assert row.flag.startswith("checked: 12.5x over eager") and "kept 55.00 us" in row.flag


def test_faster_than_the_copy_ceiling_is_not_believed():
    row = _row(20.0, 663.0, 68.6, 65.2, floor=49.6)
    flag(row, lambda: 21.0)
    assert row.remeasured and row.flag.startswith("implausible:") and "under the copy-ceiling floor" in row.flag
    row = _row(20.0, 663.0, 68.6, 65.2, floor=49.6)
    flag(row, lambda: 51.0)  # the second method finds the honest time: kept, and believed
    assert row.flag.startswith("checked:") and row.candidate_us == pytest.approx(51.0)
