"""The CPU fences: a tensor against an inaccessible page on one side, a canary on the other.

A read one byte past the fenced side must kill the process (SIGSEGV), run in a child here, and so must one megabytes
out on either side; the bytes just beside the other side are plain memory guarded by a canary, which the Guard checks
after every call.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest
import torch

from services.judge.fence import Fenced
from services.judge.run_cases import GUARD_BYTES, Guard

_READ = textwrap.dedent(
    """
    import ctypes
    from services.judge.fence import Fenced
    f = Fenced(100, at_start={at_start})
    start = ctypes.addressof(ctypes.c_char.from_buffer(f.buffer))
    ctypes.string_at(start + {offset}, 1)
    print("read")
    """
)


@pytest.mark.parametrize(
    "at_start,offset,faults",
    [
        (False, 99, False), (False, 100, True), (True, 0, False), (True, -1, True), (False, -1, False),
        (False, 100 + (4 << 20), True), (True, -(4 << 20), True),  # far out on the fenced side: the zone
        (False, -8192, True), (True, 100 + 8192, True),  # past the page on the other side: the other zone
    ],
)  # fmt: skip
def test_a_read_on_the_fenced_side_faults(at_start, offset, faults):
    code = _READ.format(at_start=at_start, offset=offset)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    if faults:
        assert done.returncode == -signal.SIGSEGV, (done.returncode, done.stderr)
    else:
        assert done.returncode == 0 and done.stdout.strip() == "read", done.stderr


def test_fenced_buffers_are_exactly_the_size_asked_and_writable():
    for at_start in (False, True):
        f = Fenced(4097, at_start=at_start)
        assert len(f.buffer) == 4097
        f.buffer[0], f.buffer[-1] = 7, 9
        assert (f.buffer[0], f.buffer[-1]) == (7, 9)


@pytest.mark.parametrize("front", [False, True])
def test_the_guard_fences_one_side_and_checks_the_canary_of_the_other(front):
    guard = Guard(torch.device("cpu"), 5, front=front)
    t = guard.empty((3, 7), dtype=torch.float32)
    raw = guard.raw[-1]
    canary = slice(raw.numel() - GUARD_BYTES, raw.numel()) if front else slice(0, GUARD_BYTES)
    assert torch.equal(raw[canary], guard.canary[GUARD_BYTES:] if front else guard.canary[:GUARD_BYTES])
    assert raw.numel() == 3 * 7 * 4 + GUARD_BYTES and t.shape == (3, 7) and guard.broken() == 0
    raw[canary] ^= 1  # a write on the canary's side
    assert guard.broken() == 1
