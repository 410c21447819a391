"""What `yantra` writes (services/cli/output.py): control characters escaped, and a closed pipe ending a command
quietly with status 141 — checked on real pipes, with the real commands against a real nats-server."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.cli import output
from services.cli.output import BROKEN_PIPE, Sanitizing, sanitize
from services.core import events as ev
from services.core.nats_launcher import free_port
from services.core.pb import events_pb2 as pb

ROOT = Path(__file__).resolve().parent.parent
CONTROLS = [chr(c) for c in [*range(0x00, 0x20), *range(0x7F, 0xA0)] if chr(c) not in "\n\t"]


def test_every_c0_and_c1_control_but_newline_and_tab_is_escaped():
    for char in CONTROLS:
        assert sanitize(f"a{char}b") == f"a\\x{ord(char):02x}b"
    assert sanitize("\x1b[2J\x1b]0;title\x07") == "\\x1b[2J\\x1b]0;title\\x07"
    assert sanitize("line\r\n") == "line\\x0d\n"


def test_text_without_controls_is_left_as_it_is():
    text = "tab\there\nnew line, a backslash \\x1b typed out, é, 漢字, 🙂, U+00A0:\xa0"
    assert sanitize(text) == text


@given(st.text(), st.text())
def test_pieces_sanitize_as_the_whole_and_nothing_acting_is_left(a, b):
    """A model's text arrives token by token: escaping each piece must equal escaping the whole."""
    assert sanitize(a) + sanitize(b) == sanitize(a + b)
    assert not set(sanitize(a + b)) & set(CONTROLS)
    assert sanitize(sanitize(a)) == sanitize(a)


def test_a_sanitizing_stream_escapes_what_print_writes():
    buffer = io.StringIO()
    print("red \x1b[31m", "\x9b", sep="|", file=Sanitizing(buffer), flush=True)
    assert buffer.getvalue() == "red \\x1b[31m|\\x9b\n"


def _closed_reader(argv: list[str], env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run `argv` with its stdout a pipe whose reader has already gone; (exit status, stderr)."""
    proc = subprocess.Popen(
        argv, cwd=ROOT, env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    proc.stdout.close()
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err.decode()


PRINTS_A_LOT = "for i in range(100_000): print(i)"


def test_a_closed_pipe_ends_the_command_with_141_and_nothing_on_stderr():
    code, err = _closed_reader([sys.executable, "-c", PRINTS_A_LOT])
    assert code != 0 and "BrokenPipeError" in err  # what every command did before: a traceback
    wrapped = f"import sys\nfrom services.cli.output import run\ndef command():\n    {PRINTS_A_LOT}\n    return 0\n"
    code, err = _closed_reader([sys.executable, "-c", wrapped + "sys.exit(run(command))"])
    assert (code, err) == (BROKEN_PIPE, "")


def test_a_broken_pipe_that_is_not_stdout_is_raised_on(capsys):
    def command() -> int:
        raise BrokenPipeError("a socket's, not stdout's")

    with pytest.raises(BrokenPipeError):
        output.run(command)


def test_run_escapes_both_streams_and_puts_them_back(capsys):
    before = sys.stdout, sys.stderr

    def command() -> int:
        print("out \x1b[2J")
        print("err \x07", file=sys.stderr)
        return 3

    assert output.run(command) == 3
    assert (sys.stdout, sys.stderr) == before
    captured = capsys.readouterr()
    assert captured.out == "out \\x1b[2J\n" and captured.err == "err \\x07\n"


# How `main` runs a command once it goes through output.run (services/cli/__init__.py):
# `return output.run(lambda: asyncio.run(args.fn(args)))`.
MAIN = (
    "import asyncio, sys\n"
    "from services.cli import build_parser\n"
    "from services.cli.output import run\n"
    "args = build_parser().parse_args(sys.argv[1:])\n"
    "sys.exit(run(lambda: asyncio.run(args.fn(args))))\n"
)


async def test_every_printing_command_ends_quietly_when_its_reader_goes(own_bus, own_nats):
    """`yantra events | head` and the like: each command that prints, on a real log, into a closed pipe."""
    run_id = "r" + uuid.uuid4().hex[:12]
    env = ev.make_envelope(
        run_id, pb.RunRequested(model="tiny-qwen2"), producer="test", time_ns=time.time_ns(), event_id="e1"
    )
    await own_bus.publish(env)
    settings = {"NATS_URL": own_nats.url, "YANTRA_SERVER_ADDR": f"127.0.0.1:{free_port()}"}
    for command in (["events"], ["events", "--follow"], ["runs"], ["replay", run_id], ["swaps"], ["dlq"]):
        code, err = _closed_reader([sys.executable, "-c", MAIN, *command], env=settings)
        assert (code, err) == (BROKEN_PIPE, ""), command
