"""What `yantra` writes: text from outside made safe to show, and a reader that goes away ending a command quietly.

Text from outside — a model's tokens, an event's run name or reason, a server's error — may hold control
characters: ESC starts a sequence that moves the cursor, recolours, retitles the window or hides what follows,
and a carriage return overwrites the line. `sanitize` writes each C0 and C1 control character (and DEL) except
newline and tab as a visible escape, `\\x1b`, both on a terminal and through a pipe (`less -R` passes escapes
through). `run` applies it to everything a command writes on stdout and stderr.

A reader that closes the pipe (`yantra events | head`) ends the command with status 141 (128 + SIGPIPE) and
nothing on stderr: the status a shell reports for any filter the pipe closes on (`seq 1000000 | head -1`), so
a script under `set -o pipefail` treats `yantra` as it treats `cat`. SIGPIPE itself stays ignored (Python's
default): its default action would also kill a command that writes to a NATS socket the server has closed.
"""

from __future__ import annotations

import os
import re
import select
import sys
from collections.abc import Callable
from typing import TextIO

BROKEN_PIPE = 128 + 13  # 128 + SIGPIPE: what the shell reports for a process the closed pipe ended

# C0 (U+0000..U+001F) but tab (09) and newline (0A), DEL (7F), and C1 (U+0080..U+009F: a terminal reads
# U+009B as CSI, like ESC [).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _escaped(match: re.Match) -> str:
    return f"\\x{ord(match.group()):02x}"


def sanitize(text: str) -> str:
    """`text` with every control character but newline and tab written as `\\xNN`, so it shows as what it is.

    Character by character, so text streamed in pieces (a model's tokens) comes out the same as whole.
    A backslash is left alone: model text is often code, and `\\x1b` typed by the model reads the same as an
    escaped ESC, which is harmless (only the real character acts on a terminal).
    """
    return _CONTROL.sub(_escaped, text)


class Sanitizing:
    """A text stream that writes through `sanitize` to the stream it wraps (print needs write and flush)."""

    def __init__(self, stream: TextIO):
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(sanitize(text))
        return len(text)

    def __getattr__(self, name: str):  # flush, fileno, isatty, encoding ...: the wrapped stream's
        return getattr(self.stream, name)


def _reader_gone(stream: TextIO) -> bool:
    """Whether `stream` is a pipe (or socket) whose reader has closed it: poll reports an error on its end."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # pytest's capture, say: no descriptor, so no pipe
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & select.POLLERR for _, events in poller.poll(0))


def run(command: Callable[[], int]) -> int:
    """Run `command` (a `yantra` command, returning its exit status) with stdout and stderr sanitized; a closed
    stdout ends it with BROKEN_PIPE and nothing printed. Both streams are as they were afterwards.

    A BrokenPipeError that is not stdout's (a socket's, say) is raised on: that is a failure to show.
    """
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = Sanitizing(out), Sanitizing(err)
    try:
        code = command()
        out.flush()  # what is still buffered meets a closed pipe here, where it is handled, not at exit
        return code
    except BrokenPipeError:
        if not _reader_gone(out):
            raise
        # The interpreter flushes stdout once more on its way out; aimed at /dev/null, that flush is silent
        # instead of "Exception ignored ... BrokenPipeError" (the recipe of Python's signal module docs).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, out.fileno())
        os.close(devnull)
        return BROKEN_PIPE
    finally:
        sys.stdout, sys.stderr = out, err
