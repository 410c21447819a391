"""Stop sequences over streamed text: what may be sent now, and whether a stop string was reached.

Text that could still turn out to be the start of a stop string is held back until it cannot, so a client
never receives part of a stop string; the text ends right before the first stop string produced.
"""

from __future__ import annotations

MAX_STOPS = 8
MAX_STOP_CHARS = 256


def stops_problem(stops: list[str]) -> str | None:
    if len(stops) > MAX_STOPS:
        return f"at most {MAX_STOPS} stop sequences, got {len(stops)}"
    for stop in stops:
        if not stop:
            return "a stop sequence is empty"
        if len(stop) > MAX_STOP_CHARS:
            return f"a stop sequence is {len(stop)} characters long, the most is {MAX_STOP_CHARS}"
    return None


class StopScanner:
    def __init__(self, stops: list[str]):
        self.stops = list(stops)
        self.held = ""
        self.stopped = False

    def push(self, delta: str) -> str:
        """The text that may be sent now; sets `stopped` when a stop string is reached (the text ends before it)."""
        text = self.held + delta
        found = [i for i in (text.find(s) for s in self.stops) if i >= 0]
        if found:
            self.held, self.stopped = "", True
            return text[: min(found)]
        hold = max((k for s in self.stops for k in range(1, len(s)) if text.endswith(s[:k])), default=0)
        self.held = text[len(text) - hold :] if hold else ""
        return text[: len(text) - hold]

    def flush(self, delta: str = "") -> str:
        """The rest at the end of generation (held text that never became a stop string)."""
        text = self.push(delta)
        if self.stopped:
            return text
        text, self.held = text + self.held, ""
        return text
