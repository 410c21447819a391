"""An in-memory run log for pure tests of the services' domains."""

from __future__ import annotations

from services.core import events as ev


class RunLog:
    """An in-memory run log; events answering a cause get ids derived from it, as the runner makes them."""

    def __init__(self, run_id: str = "run1"):
        self.run_id = run_id
        self.log: list[ev.Recorded] = []

    def add(self, msg, producer: str, cause: ev.Recorded | None = None) -> ev.Recorded:
        if cause is None:
            env = ev.make_envelope(self.run_id, msg, producer=producer, time_ns=0, event_id=f"req-{len(self.log)}")
        else:
            name = ev.type_name(msg)
            ordinal = sum(r.env.causation_id == cause.env.event_id and r.type == name for r in self.log)
            env = ev.make_envelope(
                self.run_id, msg, producer=producer, time_ns=0, causation_id=cause.env.event_id, ordinal=ordinal
            )
        rec = ev.Recorded(len(self.log) + 1, env)
        self.log.append(rec)
        return rec
