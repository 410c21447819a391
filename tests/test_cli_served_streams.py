"""`yantra optimize --served-streams`: levels a run cannot measure are refused in one line before anything is
connected to (the same rule the profiler applies to a RunRequested from any client, served_plan.streams_problem)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("levels", "says"),
    [
        (["4", "4"], "served-load levels repeat: [4, 4]"),
        (["1", "2", "3", "4", "5"], "5 served-load levels asked, at most 4"),
        (["0"], "argument --served-streams: 0 is outside 1..64"),
        (["65"], "argument --served-streams: 65 is outside 1..64"),
    ],
)
def test_levels_a_run_cannot_measure_are_one_line(levels, says, tmp_path):
    cmd = [sys.executable, "-m", "services.cli", "optimize", "--data-dir", str(tmp_path), "--served-streams", *levels]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.strip().splitlines()[-1].endswith(says), out.stderr  # argparse's usage first, if it is its own
