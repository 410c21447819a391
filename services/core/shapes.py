"""A tensor shape as events carry it: "4096x1536", "1x1x1536" (the timed and drawn shapes of a verdict)."""

from __future__ import annotations

import math
from collections.abc import Iterable


def shape_text(dims: Iterable[int]) -> str:
    return "x".join(str(int(d)) for d in dims)


def shape_dims(text: str) -> list[int]:
    """The dimensions of a shape's text; ValueError for text that is not one."""
    parts = text.split("x")
    if not all(part.isdigit() for part in parts):
        raise ValueError(f"not a shape: {text!r} (dimensions joined by 'x', such as 4096x1536)")
    return [int(part) for part in parts]


def leading_rows(text: str) -> int:
    """The rows of a row op's shape: every dimension but the last ("1x1x1536": 1)."""
    return math.prod(shape_dims(text)[:-1])
