"""Stop strings over streamed text: nothing of a stop string is ever sent, nothing else is held back."""

from __future__ import annotations

import pytest

from services.server.stops import StopScanner, stops_problem


def _stream(stops: list[str], deltas: list[str]) -> tuple[str, bool]:
    scanner = StopScanner(stops)
    sent = ""
    for delta in deltas:
        sent += scanner.push(delta)
        if scanner.stopped:
            return sent, True
    return sent + scanner.flush(), False


@pytest.mark.parametrize(
    ("deltas", "sent", "stopped"),
    [
        (["Hello ", "wor", "ld. END", " more"], "Hello world. ", True),
        (["Hello E", "N", "D"], "Hello ", True),  # split over three chunks
        (["Hello E", "NOUGH"], "Hello ENOUGH", False),  # a held prefix that did not become the stop
        (["Hello E"], "Hello E", False),  # the end of generation releases what was held
        (["##", "#"], "", True),
    ],
)
def test_the_text_ends_right_before_the_first_stop_string(deltas, sent, stopped):
    assert _stream(["END", "###"], deltas) == (sent, stopped)


def test_nothing_sent_is_ever_part_of_a_stop_string():
    scanner = StopScanner(["STOP"])
    assert scanner.push("ab S") == "ab " and scanner.push("T") == "" and scanner.push("x") == "STx"


@pytest.mark.parametrize(
    ("stops", "why"),
    [([""], "empty"), (["x"] * 9, "at most 8"), (["y" * 300], "300 characters")],
)
def test_bad_stop_lists_say_why(stops, why):
    assert why in stops_problem(stops)


def test_no_stops_is_fine():
    assert stops_problem([]) is None and _stream([], ["a", "b"]) == ("ab", False)
