"""The served range on a CPU: a launch at its real size runs a sample of its programs, each as in the whole launch.

Real Triton kernels under the interpreter (the tests' conftest sets TRITON_INTERPRET=1), on poisoned outputs.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from services.judge import sampled_grid
from services.judge.poison import NAN_BYTE


@triton.jit
def _copy_rows(x_ptr, y_ptr, n_cols, CAP: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    if row * row < CAP * row + 1:  # row <= CAP, and no constant compared with the row alone
        tl.store(y_ptr + row * n_cols + cols, x, mask=cols < n_cols)


def _poisoned(rows: int, cols: int) -> torch.Tensor:
    out = torch.empty((rows, cols), dtype=torch.float32)
    out.view(torch.uint8).fill_(NAN_BYTE)
    return out


def _launch(rows: int, cols: int, cap: int, seed: int = 7, block: int = 8):
    x = torch.randn(rows, cols)
    y = _poisoned(rows, cols)
    record: list[dict] = []
    with sampled_grid.only(seed, lambda: [y], record):
        _copy_rows[(rows,)](x, y, cols, CAP=cap or rows, BLOCK=block)
    return x, y, record


def test_the_picked_programs_are_the_edges_powers_of_two_and_a_few_drawn():
    ids = sampled_grid.picked(131_072, seed=1)
    assert {0, 131_071, 131_070, 65_536, 4095, 4096, 32_767, 32_768, 65_535} <= set(ids)
    assert len(ids) <= 24 and ids == sorted(set(ids))
    assert sampled_grid.picked(131_072, seed=1) == ids  # the judging's seed decides the drawn ones
    assert sampled_grid.picked(4, seed=1, elements=131_072 * 1536) == []  # a persistent grid: none
    assert sampled_grid.picked(3, seed=1) == [0, 1, 2]


def test_a_sampled_launch_runs_only_the_picked_programs_each_as_in_the_whole_launch():
    rows = 5000
    x, y, record = _launch(rows, 4, cap=0)
    [launch] = record
    assert launch["grid"] == rows and launch["silent"] == []
    written, partial = sampled_grid.touched_rows(y)
    assert partial is None
    assert written.tolist() == launch["ran"]  # one row a program: the picked ones, no other
    assert torch.equal(y[written], x[written])
    assert torch.isnan(y[1]).all()  # a program not picked never ran


def test_a_cap_below_the_maximum_leaves_the_last_rows_unwritten_and_says_where():
    x, y, record = _launch(5000, 4, cap=4096)
    [launch] = record
    assert launch["silent"] == []  # the programs past the cap are a suffix, as a persistent grid's spare ones are
    assert launch["idle_from"] == 4097  # found by bisection between the picked ones
    assert {4096, 4097} <= set(launch["ran"])
    reason = sampled_grid.silent_programs(record, (5000, 4), [y])
    assert "the call's last element was never written: programs from 4,097 of 5,000 of _copy_rows" in reason


@triton.jit
def _tiles_of_rows(
    x_ptr, y_ptr, n_rows, n_cols, ROWS: tl.constexpr, SKIP: tl.constexpr, ONE: tl.constexpr, BLOCK: tl.constexpr
):
    tile = tl.program_id(0)  # a grid of a program a row: the programs past the tiles have no work, as a persistent
    cols = tl.arange(0, BLOCK)  # grid's spare ones
    for r in tl.static_range(ROWS):
        row = tile * ROWS + r
        mask = (cols < n_cols) & (cols * 0 + row < n_rows)
        if tile != SKIP or (ONE and r != 1):  # program SKIP (-1: none) writes nothing, or with ONE its second row only
            tl.store(y_ptr + row * n_cols + cols, tl.load(x_ptr + row * n_cols + cols, mask=mask), mask=mask)


def _tiles(rows: int, skip: int, one: bool = False):
    x, y, record = torch.randn(rows, 8), _poisoned(rows, 8), []  # a row of 32 bytes: four words
    with sampled_grid.only(5, lambda: [y], record):
        _tiles_of_rows[(rows,)](x, y, rows, 8, ROWS=4, SKIP=skip, ONE=one, BLOCK=8)
    return x, y, record


def test_programs_with_no_work_past_the_tiles_are_spare_and_the_last_tile_is_found_and_run():
    x, y, record = _tiles(4096, skip=-1)
    [launch] = record
    assert launch["silent"] == [] and launch["idle_from"] == 1024  # 4,096 rows in tiles of 4
    assert 1023 in launch["ran"] and sampled_grid.silent_programs(record, (4096, 8), [y]) == ""
    assert torch.equal(y[-4:], x[-4:])


def test_a_program_that_skips_its_rows_below_one_that_wrote_is_named():
    _, y, record = _tiles(4096, skip=0)  # the first program, always picked
    [launch] = record
    assert launch["silent"] == [0]
    assert "program(s) 0 of 4,096 of _tiles_of_rows wrote nothing while a later one wrote" in (
        sampled_grid.silent_programs(record, (4096, 8), [y])
    )


def test_without_a_watch_nothing_is_called_silent():
    y = _poisoned(2048, 4)
    record: list[dict] = []
    with sampled_grid.only(3, None, record):
        _copy_rows[(2048,)](torch.randn(2048, 4), y, 4, CAP=1, BLOCK=8)  # every row past the second unwritten
    assert record[0]["silent"] == [] and record[0]["ran"]


def test_a_row_written_in_part_is_named():
    out = _poisoned(6, 4)
    out[2] = 1.0
    out[4, :2] = 1.0
    rows, partial = sampled_grid.touched_rows(out)
    assert rows.tolist() == [2, 4] and partial == 4


def test_the_interpreter_it_replaces_is_restored_after():
    from triton.runtime import interpreter

    before = interpreter.GridExecutor.__call__
    _launch(1024, 4, cap=0)
    assert interpreter.GridExecutor.__call__ is before
    assert sampled_grid.available()


def test_written_counts_words_that_left_the_poison():
    t = _poisoned(3, 5)  # 60 bytes: seven words and a ragged tail of four
    assert sampled_grid.written(t) == 0
    t[2, 4] = 0.0  # the tail's four bytes
    t[0, 0] = 1.0  # one word
    assert sampled_grid.written(t) == 1 + 4


def test_a_program_that_skips_one_of_its_rows_writes_a_short_share_and_is_named():
    _, y, record = _tiles(4096, skip=0, one=True)  # program 0 writes rows 0, 2 and 3 of its four
    reason = sampled_grid.silent_programs(record, (4096, 8), [y])
    assert "program 0 of 4,096 of _tiles_of_rows wrote 12 words where others wrote 16" in reason, reason
    assert sampled_grid.silent_programs(record, (4096, 8), [y], even=False) == ""  # RoPE's q and k: not asked
    _, y, record = _tiles(4099, skip=-1)  # a ragged last tile writes less, and is honest
    assert sampled_grid.silent_programs(record, (4099, 8), [y]) == ""


def test_rows_whose_bytes_straddle_words_are_honest_shares():
    _, y, record = _launch(5000, 97, cap=0, block=128)  # 388 bytes a row: 48 words and a half
    assert sampled_grid.silent_programs(record, (5000, 97), [y]) == ""
    # a program run beside one that ran first finds a word at its edge written already: a word short at each end
    launch = {"kernel": "k", "grid": 5000, "shares": {0: 49, 99: 49, 100: 48, 101: 47, 4999: 3}}
    assert sampled_grid.short_share([launch]) is None
    launch["shares"][2048] = 40  # a row's worth short: some of its rows unwritten
    assert sampled_grid.short_share([launch])[1:] == (2048, 40, 49)
