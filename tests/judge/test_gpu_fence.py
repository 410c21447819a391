"""The GPU's own fence (services.judge.gpu_fence): tensors flush with unmapped addresses, a fault ends the child.

On a CPU: which errors count as a GPU memory fault, and that the child's exit code for one is read as `memory-fault`
by the same mapping as a CPU child's SIGSEGV. On a GPU (`gpu`): a fenced buffer holds a tensor Triton kernels read
and write, a read past its end kills the process with GPU_FAULT_EXIT (a real kernel, in a child process: the fault
loses its CUDA context), and the judge rejects the corpus's large-rows over- and under-read, which a CPU judge accepts.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from services.judge import gpu_fence

REPO = Path(__file__).resolve().parents[2]


def _run(script: str, where: Path | None = None) -> subprocess.CompletedProcess:
    """`script` in a fresh interpreter; from a file in `where` when it defines a Triton kernel (jit reads source)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    run = [sys.executable, "-c", script]
    if where is not None:
        (where / "script.py").write_text(script)
        run = [sys.executable, str(where / "script.py")]
    return subprocess.run(run, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def test_the_cuda_errors_of_an_unmapped_access_are_faults_and_others_are_not():
    fault = RuntimeError("CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be ...")
    assert gpu_fence.is_fault(fault)
    assert gpu_fence.is_fault(RuntimeError("Triton Error [CUDA]: misaligned address"))
    assert not gpu_fence.is_fault(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert not gpu_fence.is_fault(ValueError("an illegal argument"))


def test_a_child_ending_on_a_gpu_fault_is_judged_memory_fault_and_a_plain_exit_is_not():
    ending = "from services.judge import gpu_fence; gpu_fence.exit_on_fault(RuntimeError({!r}))"
    fault = _run(ending.format("an illegal memory access was encountered"))
    assert fault.returncode == gpu_fence.GPU_FAULT_EXIT == 139, fault.stderr
    assert "gpu fence: the GPU faulted (an illegal memory access was encountered)" in fault.stderr, fault.stderr
    other = _run(ending.format("out of memory"))
    assert other.returncode == 0, other.stderr


def test_switched_off_it_says_so_without_touching_a_device(monkeypatch):
    import torch

    monkeypatch.setenv("YANTRA_JUDGE_GPU_FENCE", "0")
    assert not gpu_fence.available(torch.device("cuda"))
    assert "switched off" in gpu_fence.status()


_OVER_READ = """
import torch, triton, triton.language as tl
from services.judge import gpu_fence

@triton.jit
def over_read(w_ptr, y_ptr, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    w = tl.load(w_ptr + cols)  # no mask: past 80 lanes it reads beyond w
    # every lane stored: a load whose lanes only a masked store would use may be sunk under that mask by the
    # compiler and never issued (seen on the H200: no fault), so this test keeps them live
    tl.store(y_ptr + cols, w)

assert gpu_fence.available(torch.device("cuda")), gpu_fence.status()
raw = gpu_fence.fenced_bytes(80 * 4, 0)
w = raw.view(torch.float32)
w.copy_(torch.arange(80, dtype=torch.float32, device="cuda"))
y = torch.zeros(128, device="cuda")
try:
    over_read[(1,)](w, y, BLOCK={block})
    torch.cuda.synchronize()
    print("read", float(y.sum()))  # 0 + 1 + ... + 63 with 64 lanes
except Exception as exc:
    gpu_fence.exit_on_fault(exc)
    raise
"""


@pytest.mark.gpu
def test_a_fenced_tensor_is_read_within_and_faults_one_element_past_its_end(tmp_path):
    inside = _run(textwrap.dedent(_OVER_READ).format(block=64), tmp_path)  # 64 lanes of 80: all inside
    assert inside.returncode == 0 and "read 2016.0" in inside.stdout, inside.stderr[-2000:]
    past = _run(textwrap.dedent(_OVER_READ).format(block=128), tmp_path)  # 48 lanes past the end
    assert past.returncode == gpu_fence.GPU_FAULT_EXIT, (past.returncode, past.stderr[-2000:])
    assert "gpu fence: the GPU faulted" in past.stderr, past.stderr[-2000:]


@pytest.mark.gpu
def test_fenced_buffers_on_both_sides_hold_what_is_written():
    import torch

    assert gpu_fence.available(torch.device("cuda")), gpu_fence.status()
    for at_start in (False, True):
        raw = gpu_fence.fenced_bytes(3 * 1536 * 2, 0, at_start=at_start)
        x = raw.view(torch.bfloat16).view(3, 1536)
        x.copy_(torch.randn(3, 1536, device="cuda"))
        assert torch.equal((x * 1).cpu(), x.cpu())
    del raw, x
    torch.cuda.synchronize()


_READ_BEFORE = """
import torch, triton, triton.language as tl
from services.judge import gpu_fence

@triton.jit
def read_before(w_ptr, y_ptr, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    tl.store(y_ptr + cols, tl.load(w_ptr - BLOCK + cols))  # the BLOCK floats just before the tensor: its slack

assert gpu_fence.available(torch.device("cuda")), gpu_fence.status()
for _ in range(3):  # physical memory that last held NaNs, released: the driver hands the same pages out again
    dirty = gpu_fence.fenced_bytes(80 * 4, 0)
    dirty.view(torch.float32).fill_(float("nan"))
    torch.cuda.synchronize()
    del dirty
w = gpu_fence.fenced_bytes(80 * 4, 0).view(torch.float32)
y = torch.full((64,), 7.0, device="cuda")
read_before[(1,)](w, y, BLOCK=64)
torch.cuda.synchronize()
print("before", float(y.abs().sum()), int(y.isnan().sum()))
"""


@pytest.mark.gpu
def test_the_slack_beside_a_fenced_tensor_reads_zeros_whatever_the_memory_held(tmp_path):
    """An under-read that stays in the tensor's granule (the fault comes at the rerun against the other zone) reads
    zeros, as on a CPU: never what the memory last held, so the first pass's verdict is the same on every machine."""
    got = _run(textwrap.dedent(_READ_BEFORE), tmp_path)
    assert got.returncode == 0, got.stderr[-2000:]
    assert "before 0.0 0" in got.stdout, got.stdout


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["memory_overread_large_rows_only", "memory_underread_large_rows_only"])
def test_the_large_rows_reads_a_cpu_judge_accepted_are_refused_before_the_gpu_runs_them(name, tmp_path):
    """The GPU's fence met these reads (a weight read at offsets that move with the rows) at the row counts a GPU
    judging draws; the row-local rule refuses them on every device before anything runs."""
    sys.path.insert(0, str(REPO / "tests" / "adversarial"))
    from adversarial_corpus import TABLE, judge_entry

    from services.judge.report import verdict_layer

    entry = next(e for e in TABLE if e.name == name)
    judged, _ = asyncio.run(judge_entry(entry, "cuda", scratch_dir=tmp_path))
    assert judged.reward == -1
    assert verdict_layer(judged.observed) == ("static", ["row-local"]), judged.reason
