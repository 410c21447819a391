"""bench/targets.py: a family's standing against the op-families targets, and the ceiling any kernel reaches."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _targets():
    spec = importlib.util.spec_from_file_location("bench_targets", ROOT / "bench" / "targets.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _shape(rows: int, ours: dict, peers: dict) -> dict:
    return {"rows": rows, "width": 4096, "impls": {**ours, **peers}}


def test_a_familys_figures_take_the_best_of_ours_and_the_fastest_correct_peer():
    targets = _targets()
    results = [
        _shape(  # decode: ours 2 us (the faster config) at 50% of a same-size copy (1 us); compile 3, a wrong peer 0.5
            1,
            {"ours_a": {"graph_us": 2.0, "pct_of_same_size_copy": 50.0, "us": 5.0},
             "ours_b": {"graph_us": 4.0, "pct_of_same_size_copy": 25.0}},
            {"torch_compile": {"graph_us": 3.0, "us": 20.0}, "broken": {"graph_us": 0.5, "correct": False}},
        ),
        _shape(  # prefill: ours 100 us at 90% of a copy; Liger 95 us
            4096,
            {"ours_a": {"graph_us": 100.0, "pct_of_same_size_copy": 90.0}},
            {"liger": {"graph_us": 95.0}},
        ),
    ]  # fmt: skip
    figures = targets.family_figures(results)
    assert figures["geomean_best_peer_over_ours"] == pytest.approx(math.sqrt(1.5 * 0.95))
    assert figures["bound_geomean"] == pytest.approx(math.sqrt(3.0 / 1.0 * 95.0 / 90.0))
    assert figures["slowest"] == {"shape": "4096x4096", "best_peer": "liger", "best_peer_over_ours": 0.95}
    assert figures["prefill_pct_of_same_size_copy"] == [pytest.approx(90.0), pytest.approx(90.0)]
    assert figures["decode_host_geomean_best_peer_over_ours"] == pytest.approx(20.0 / 5.0)
    assert figures["shapes"][0]["ours"] == "ours_a"


def test_one_config_is_the_config_with_the_best_geomean_over_every_shape():
    """Each shape's best config is what a dispatch by size would reach; one config alone reaches less: the one whose
    geomean over every shape is best (a config not timed at every shape is not one)."""
    targets = _targets()
    results = [
        _shape(1, {"ours_a": {"graph_us": 2.0, "pct_of_same_size_copy": 50.0},
                   "ours_b": {"graph_us": 4.0, "pct_of_same_size_copy": 25.0},
                   "ours_c": {"graph_us": 1.0, "pct_of_same_size_copy": 99.0}}, {"torch_compile": {"graph_us": 3.0}}),
        _shape(4096, {"ours_a": {"graph_us": 120.0, "pct_of_same_size_copy": 90.0},
                      "ours_b": {"graph_us": 90.0, "pct_of_same_size_copy": 95.0}}, {"liger": {"graph_us": 95.0}}),
    ]  # fmt: skip
    figures = targets.family_figures(results)
    assert figures["geomean_best_peer_over_ours"] == pytest.approx(math.sqrt(3.0 / 1.0 * 95.0 / 90.0))  # c, then b
    assert figures["one_config"] == {
        "config": "ours_a",  # sqrt(1.5 · 0.79) beats ours_b's sqrt(0.75 · 1.06); ours_c was timed at one shape
        "geomean_best_peer_over_it": pytest.approx(math.sqrt(3.0 / 2.0 * 95.0 / 120.0)),
    }


def test_the_committed_results_give_every_family(tmp_path):
    out = tmp_path / "targets.json"
    done = subprocess.run(
        [sys.executable, "bench/targets.py", "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    families = json.loads(out.read_text())["families"]
    assert set(families) == set(_targets().FAMILIES)
    for figures in families.values():
        assert 0.5 < figures["geomean_best_peer_over_ours"] <= figures["bound_geomean"] * 1.05


def test_a_missing_result_file_is_named_not_a_traceback(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "bench/targets.py"), "--results", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and "no result file" in done.stdout and "Traceback" not in done.stderr
