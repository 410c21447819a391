"""bench/gpu_memcheck.py on a CPU: its kernels and inputs (the inner mode, interpreted), its refusal without a GPU or
a checker, and how it reads a compute-sanitizer report. The checker itself runs only on a GPU machine."""

from __future__ import annotations

import importlib.util
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "gpu_memcheck.py"


def _load():
    spec = importlib.util.spec_from_file_location("gpu_memcheck", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_memcheck"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


memcheck = _load()


def test_every_registered_family_has_an_honest_entry_and_inputs():
    from services.ops import FAMILIES

    honest = [e for e in memcheck.entries() if e.kind == "honest"]
    assert {e.family for e in honest} == set(FAMILIES)
    assert set(FAMILIES) <= set(memcheck.INPUTS)
    assert {"row_reduction_rmsnorm", "row_reduction_layernorm", "honest_corpus"} <= {e.name for e in honest}
    assert len(memcheck.candidates(memcheck.entry_named("honest_corpus"))) >= 10  # every tests/adversarial/honest
    hostile = {e.name: e for e in memcheck.entries() if e.kind == "hostile"}
    assert hostile["memory_overread_unmasked"].access == "read"
    for entry in hostile.values():  # each hostile file is in the corpus, with its plan
        [(_, source, plan)] = memcheck.candidates(entry)
        assert "@triton.jit" in source and plan.family == "row_reduction"


def test_each_template_entry_runs_its_first_config_and_another():
    for entry in memcheck.honest_entries():
        labels = [label for label, _, _ in memcheck.candidates(entry)]
        assert len(labels) >= 2 and len(set(labels)) == len(labels), (entry.name, labels)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU path: the interpreter")
@pytest.mark.parametrize("name", [e.name for e in memcheck.entries() if e.kind in ("probe", "honest")])
def test_inner_runs_each_honest_entry_interpreted(name, capsys):
    assert os.environ.get("TRITON_INTERPRET") == "1"  # tests/conftest.py, before triton was imported
    calls = memcheck.run_inner(name, quick=True)
    out = capsys.readouterr().out
    assert calls > 0
    assert f"{memcheck.DONE} {name} calls={calls} device=cpu" in out
    assert memcheck.inner_done(out) == calls


def test_outer_without_the_checker_exits_2_with_one_line(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path), "CUDA_HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, str(SCRIPT), "--sanitizer", str(tmp_path / "compute-sanitizer")],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)  # fmt: skip
    assert done.returncode == 2
    assert "Traceback" not in done.stderr + done.stdout
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("gpu_memcheck: no compute-sanitizer at ") and line.endswith("nothing checked")


def test_outer_on_this_machine_exits_2_without_a_checker_or_a_gpu(tmp_path):
    """Here (no GPU, or no checker): exit 2, one line, no traceback, whichever is missing."""
    if torch.cuda.is_available() and memcheck.find_sanitizer():
        pytest.skip("a GPU and a checker are here: the outer mode would run")
    env = {**os.environ, "PATH": os.path.dirname(sys.executable), "CUDA_HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "out.json")], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=120)  # fmt: skip
    assert done.returncode == 2
    assert "Traceback" not in done.stderr + done.stdout
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("gpu_memcheck: no ") and line.endswith("nothing checked")
    assert not (tmp_path / "out.json").exists()


def test_find_sanitizer_searches_path_then_cuda_home(tmp_path):
    none = dict(cuda_globs=(), walk_roots=(), site_dirs=())
    assert memcheck.find_sanitizer(path_env="", cuda_home="", **none) is None
    home = tmp_path / "cuda"
    (home / "bin").mkdir(parents=True)
    tool = home / "bin" / "compute-sanitizer"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    assert memcheck.find_sanitizer(path_env="", cuda_home=str(home), **none) == (str(tool), "$CUDA_HOME")
    assert memcheck.find_sanitizer(path_env=str(home / "bin"), cuda_home="", **none) == (str(tool), "PATH")
    pip = tmp_path / "site" / "nvidia" / "cuda_sanitizer_api" / "compute-sanitizer"
    pip.mkdir(parents=True)
    (pip / "compute-sanitizer").write_bytes(tool.read_bytes())
    (pip / "compute-sanitizer").chmod(0o755)
    found = memcheck.find_sanitizer(path_env="", cuda_home="", cuda_globs=(), walk_roots=(),
                                    site_dirs=[str(tmp_path / "site")])  # fmt: skip
    assert found == (str(pip / "compute-sanitizer"), "an nvidia pip package")


SAMPLE = """\
========= COMPUTE-SANITIZER
  memory_overread_unmasked [memory_overread_unmasked] bfloat16 1536: x (1, 1, 1536) x2 ok
========= Invalid __global__ read of size 2 bytes
=========     at _rms_kernel+0x1c0 in k_3f2a.py:24
=========     by thread (127,0,0) in block (0,0,0)
=========     Address 0x7f3a2e000c00 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f3a2e000000 of size 3072 bytes
=========
========= Invalid __global__ read of size 2 bytes
=========     at _rms_kernel+0x1c0 in k_3f2a.py:24
=========     by thread (128,0,0) in block (0,0,0)
=========     Address 0x7f3a2e000c02 is out of bounds
=========
========= Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on CUDA API call to \
cudaStreamSynchronize.
=========     Saved host backtrace up to driver entry point at error
=========         Host Frame: [0x2f1c5e] in libcuda.so.1
=========
========= ERROR SUMMARY: 3 errors
"""


def test_parse_report_counts_a_captured_sample():
    report = memcheck.parse_report(SAMPLE)
    assert report["banner"] is True
    assert report["errors"] == 3
    assert report["invalid_reads"] == 2 and report["invalid_writes"] == 0
    assert report["memory_errors"] == 2 and report["api_errors"] == 1
    assert report["refused"] is False
    assert report["error_lines"][0] == "========= Invalid __global__ read of size 2 bytes"
    assert any("after the nearest allocation" in line for line in report["error_lines"])
    assert not any("Host Frame" in line for line in report["error_lines"])
    assert memcheck.inner_done(SAMPLE) is None  # the program never said it finished


def test_parse_report_a_refused_device_and_a_clean_run():
    refused = "========= COMPUTE-SANITIZER\n========= Error: Device not supported\n" + "CUDA error: unknown error\n"
    report = memcheck.parse_report(refused)
    assert report["refused"] is True and report["errors"] is None
    done = f"{memcheck.DONE} probe calls=1 device=cuda"
    clean = f"========= COMPUTE-SANITIZER\n{done}\n========= ERROR SUMMARY: 0 errors\n"
    report = memcheck.parse_report(clean)
    assert report["errors"] == 0 and report["memory_errors"] == 0 and not report["refused"]
    probe = memcheck.entry_named("probe")
    assert memcheck.judge_entry(probe, report, memcheck.inner_done(clean), 0, False) == (
        True,
        "clean (1 calls, 0 memory errors)",
    )
    hostile = memcheck.entry_named("memory_overread_unmasked")
    ok, verdict = memcheck.judge_entry(hostile, report, 1, 0, False)
    assert not ok and verdict.startswith("missed")
    ok, verdict = memcheck.judge_entry(hostile, memcheck.parse_report(SAMPLE), None, 97, False)
    assert ok and verdict.startswith("flagged (2 invalid read")


def test_options_are_taken_only_where_the_checker_lists_them():
    help_text = "  --padding arg (=0)   Size in bytes\n  --print-limit arg (=100)\n"
    assert memcheck.sanitizer_options(help_text) == ["--padding", "512", "--print-limit", "20"]
    assert memcheck.sanitizer_options("") == []
