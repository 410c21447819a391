"""Screens of the TUI: the runs list, a run, a candidate, an event's payload, help."""
