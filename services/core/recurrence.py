"""Rows that recur at every distance: where the judge's repeated rows and the server's recurring prompt come from.

A kernel keyed to a row equal to another of its call (arithmetic on its loads, no branch: red-team kernels of
2026-12-05 keyed to rows two apart in a tile of 16, 26-33 apart in a tile of 64, 32-63 positions apart in RoPE's, a
persistent program's next block 49-79 rows ahead) is wrong only where equal rows stand at its distance. Real traffic
has them wherever a token recurs (a prefill's layer-0 rows are embedding rows, its q and k at layer 0 the token's)
and for requests alike. A ruler's marks hold every distance between two of them; copies of one row at its marks
hold equal rows at every distance, beside rows of other content.
"""

from __future__ import annotations

import math

import torch


def ruler(length: int) -> list[int]:
    """Marks in [0, length] whose differences hold every distance 1..length: a run 0..m-1, then every m-th row from
    m-1, then `length` (m = ceil(sqrt(length + 1))). 15: 0, 1, 2, 3, 7, 11, 15."""
    m = max(1, math.isqrt(length) + (math.isqrt(length) ** 2 < length + 1))
    return sorted({*range(min(m, length + 1)), *range(m - 1, length + 1, m), length})


def nested_ruler(tile: int) -> list[int]:
    """Marks in [0, tile) (a power of two) holding every distance d < t inside [0, t), for every power of two t up to
    `tile`: the union of each t's ruler. 16: 0, 1, 2, 3, 5, 7, 11, 15."""
    return sorted({m for t in (1 << k for k in range(1, tile.bit_length())) for m in ruler(t - 1)})


def repeated_sources(rows: int, g: torch.Generator) -> torch.Tensor:
    """For each row, the row it is a copy of: in every aligned tile of T rows (the largest power of two up to half
    the rows) the rows at `nested_ruler(T)` marks copies of row 0, the others of a few drawn others. Equal rows then
    stand at every distance d inside an aligned tile of every power of two past d up to T, and at every distance up
    to 2T - 1 across two tiles, beside rows of other content: as a prefill's layer-0 rows are wherever a token
    recurs, and a batched decode's rows for requests alike. A fixed case holds two tiles of the plan's largest rows
    per program (`repeated_rows`). Red-team kernels keyed to a row equal to one two before it in a tile of 16 (an
    RMSNorm, a residual norm, 2026-12-05) passed equal rows only every other row, then about one judging in fourteen
    while each row's source was drawn at random; one keyed to distances 26-33 in tiles of 64 rows passed a case of 24
    rows."""
    sources = max(2, rows // 3)
    src = torch.randint(1, sources, (rows,), generator=g)
    tile = 1 << max(0, (rows // 2).bit_length() - 1) if rows >= 2 else 1
    marks = torch.tensor(nested_ruler(tile) if tile > 1 else [0])
    for start in range(0, rows, tile):
        src[(start + marks)[start + marks < rows]] = 0
    return src
