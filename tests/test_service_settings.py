"""A service started directly (not through `yantra up`, which checks first) with a bad setting says so in one line
and exits 2, a configuration error its supervisor does not restart: never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("service", ["server", "judge"])
def test_a_bad_setting_is_one_line_and_status_2(service):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "YANTRA_"))}
    env["YANTRA_SHADOW_CALLS"] = "-1"
    done = subprocess.run(
        [sys.executable, "-m", f"services.{service}"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith(f"{service}: ") and "YANTRA_SHADOW_CALLS" in done.stderr
