"""How long one call of a candidate's kernel may take: proportional to the bytes it moves, never under a floor.

Pure and stdlib-only, shared by the judge (its sandbox child times each case call against it:
services.judge.run_cases.CallClock) and the server (the same limit on the live path), so a kernel the judge
let through in time is held to the same time where it serves. A kernel whose loops all end (the dataflow
check proves that much) can still take 10^9 steps: correct, and stuck for minutes with every request batched
beside it. The limit is generous by orders of magnitude for an honest kernel and tight enough that such a
call is stopped in seconds, not after the sandbox's whole timeout.

    limit = max(floor, bytes_moved / slow_bandwidth)

The constants, with the arithmetic:

- **CPU, Triton's interpreter** (a kernel body is Python over numpy, one program and one block at a time, so
  an interpreted kernel's rate is set by its block, not by memory). Measured on this project's 2-core CPU: the
  corpus's two-pass kernel in 32-column chunks moved 20-30 kB/s (64 rows x 1,536 bf16 in 14-20 s), the
  one-row-per-program kernel ~0.7 MB/s; the slowest case call of an honest corpus entry in the judge took
  0.2 s (its cases are a few kB). The slow bandwidth is 2 kB/s (10x under the chunked kernel's rate; a
  machine shared by four children is 2-3x slower) and the floor 20 s (100x the slowest honest case call):
  the judge's CPU cases all get the floor; a 2,048 x 1,536 bf16 prefill on a CPU server (12.6 MB) gets 105 min.
- **GPU, compiled**: an H200 moves ~4 TB/s; the slowest honest kernel timed there, one program walking 32,768
  rows (~200 MB in ~41 ms: docs/judge.md), moved ~5 GB/s. The slow bandwidth is 100 MB/s (50x under that):
  32,768 x 4,096 in bf16 (537 MB) may take 5.4 s. A first call compiles the kernel (Triton and ptxas: 1-10 s,
  more on a loaded host), so a call that may compile gets a 60 s floor; a warm one (the server's calls after
  its first) gets 2 s: ~1,000x a decode step's kernel.
"""

from __future__ import annotations

from collections.abc import Iterable

CPU_FLOOR_S = 20.0  # the interpreter: 100x the slowest honest case call of the corpus's (0.2 s)
CPU_SLOW_BYTES_PER_S = 2e3  # 10x under the slowest honest interpreted rate measured (a 32-column chunked kernel)
GPU_COMPILE_FLOOR_S = 60.0  # a call that may compile its kernel first (Triton + ptxas: 1-10 s)
GPU_WARM_FLOOR_S = 2.0  # a compiled kernel's call: ~1,000x a decode step
GPU_SLOW_BYTES_PER_S = 100e6  # 50x under the slowest honest kernel timed on the H200 (~5 GB/s)


def call_limit_s(bytes_moved: float, device: str, *, may_compile: bool = True) -> float:
    """Seconds one call moving `bytes_moved` bytes (read + written) may take on `device` ("cpu": Triton's
    interpreter; "cuda"/"cuda:N": compiled). `may_compile`: the call may compile its kernel first (the judge's
    every case call; the server's first call after a swap); a warm call gets the GPU's lower floor."""
    if bytes_moved < 0:
        raise ValueError(f"bytes moved cannot be negative: {bytes_moved}")
    if device.split(":", 1)[0] == "cpu":
        return max(CPU_FLOOR_S, bytes_moved / CPU_SLOW_BYTES_PER_S)
    floor = GPU_COMPILE_FLOOR_S if may_compile else GPU_WARM_FLOOR_S
    return max(floor, bytes_moved / GPU_SLOW_BYTES_PER_S)


def call_bytes(input_bytes: Iterable[int], output_bytes: Iterable[int] = ()) -> int:
    """The bytes a call moves: what it reads (its tensor arguments) and what it writes (its outputs). Where the
    outputs are not known before the call, pass none: the inputs are then counted twice (an op writes about
    as much as it reads: a norm, an activation, RoPE), which only makes the limit more generous."""
    read = sum(int(n) for n in input_bytes)
    written = [int(n) for n in output_bytes]
    return read + (sum(written) if written else read)


def describe(call: str, shape: str, bytes_moved: float, limit_s: float, seconds: float | None = None) -> str:
    """The one line a call past its limit is rejected (or swapped out) with: the call, its shape, the limit.
    `seconds`: how long it took, where it returned; None where it was stopped still running."""
    took = f"ran {seconds:.1f} s, past" if seconds is not None else "was still running at"
    return f"{call} at {shape} {took} its per-call limit of {limit_s:.1f} s ({bytes_moved / 1e3:.1f} kB moved)"
