"""Hardware ceilings measured once on the serving device: the copy bandwidth and the matmul rate.

The profiler turns these into roofline floors, so they must describe this machine, not a table.
"""

from __future__ import annotations

import functools
import statistics
import time

import torch

from services.core.pb import events_pb2 as pb

REPS = 5


def _median_seconds(fn, device: str, reps: int = REPS) -> float:
    fn()  # warm-up: allocator, kernel selection, lazy init
    if device.startswith("cuda"):
        times = []
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        return statistics.median(times)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def calibrate(device: str) -> pb.HardwareFigures:
    """Copy bytes (read + written) per second and dense matmul FLOP/s on `device`, median of a few reps.

    Measured once per process and device; each caller gets its own copy of the message.
    """
    figures = pb.HardwareFigures()
    figures.CopyFrom(_calibrate(device))
    return figures


@functools.lru_cache(maxsize=4)
def _calibrate(device: str) -> pb.HardwareFigures:
    with torch.inference_mode():
        if device.startswith("cuda"):
            # 1 GiB each way: far beyond L2 (50 MB on H100/H200), so HBM is what is measured.
            n_bytes, mm_n, mm_dtype = 1 << 30, 8192, torch.bfloat16
            name = torch.cuda.get_device_name(torch.device(device))
        else:
            n_bytes, mm_n, mm_dtype = 64 << 20, 512, torch.float32
            name = _cpu_name()
        copy_s = _copy_seconds(n_bytes, device)
        mm_s = _matmul_seconds(mm_n, mm_dtype, device)
    return pb.HardwareFigures(
        device="cuda" if device.startswith("cuda") else "cpu",
        device_name=name,
        peak_bytes_per_s=2 * n_bytes / copy_s,
        peak_flops=2 * mm_n**3 / mm_s,
        calibrated=True,
    )


def _copy_seconds(n_bytes: int, device: str) -> float:
    src = torch.empty(n_bytes // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    return _median_seconds(lambda: dst.copy_(src), device)


def _matmul_seconds(n: int, dtype: torch.dtype, device: str) -> float:
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    return _median_seconds(lambda: a @ b, device)


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "cpu"
