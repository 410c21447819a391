"""Widgets of the TUI: each shows one part of the state and talks to its screen in Messages."""
