"""The Textual terminal UI (see issue: `yantra tui`)."""
