"""A shape as events carry it: written, read back, its rows; text that is no shape is refused by name."""

from __future__ import annotations

import pytest

from services.core.shapes import leading_rows, shape_dims, shape_text


def test_a_shape_round_trips_and_counts_its_rows():
    assert shape_text((1, 1, 1536)) == "1x1x1536" and shape_dims("1x1x1536") == [1, 1, 1536]
    assert leading_rows("4096x1536") == 4096 and leading_rows("2x3x64") == 6 and leading_rows("64") == 1


@pytest.mark.parametrize("text", ["", "4096x", "x1536", "4096 x 1536", "-1x64", "4096x1536; rm -rf"])
def test_text_that_is_no_shape_is_refused_by_name(text):
    with pytest.raises(ValueError, match="not a shape"):
        shape_dims(text)
