"""Messages the I/O workers post to the app: events read, and the state of the connection."""

from __future__ import annotations

from textual.message import Message

from services.core.events import Recorded
from tui.live import Link


class EventsArrived(Message):
    """A batch of events read from the stream, in stream order."""

    def __init__(self, records: list[Recorded]) -> None:
        super().__init__()
        self.records = records


class DlqChanged(Message):
    """How many messages the dead-letter stream holds now (live only)."""

    def __init__(self, count: int) -> None:
        super().__init__()
        self.count = count


class LinkChanged(Message):
    """The connection to NATS changed (connecting, connected, waiting for streams, lost)."""

    def __init__(self, link: Link) -> None:
        super().__init__()
        self.link = link
