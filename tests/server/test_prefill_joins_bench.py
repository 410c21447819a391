"""bench/prefill_joins.py runs end to end on the tiny live model (CPU, eager joins): each row timed both ways."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import prefill_joins  # noqa: E402


def test_every_join_is_timed_as_one_and_in_groups(tmp_path):
    out = tmp_path / "joins.json"
    args = ["--model", "tiny-qwen2", "--device", "cpu", "--reps", "1", "--joins", "1", "5", "--lengths", "8"]
    assert prefill_joins.main([*args, "--slot-tokens", "32", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    rows = [(r["prompts"], r["tokens"], r["one_join_path"], r["groups_path"]) for r in result["rows"]]
    assert rows == [(1, 8, "eager", "eager"), (5, 8, "eager", "eager")]  # no graphs on a CPU: eager both ways
    assert all(r["one_join_ms"] > 0 and r["groups_ms"] > 0 for r in result["rows"])
    assert result["group"] == 4 and not result["graphs"] and "--joins 1 5" in result["command"]
