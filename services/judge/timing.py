"""Honest GPU timing of a candidate against its baselines (runs inside the sandbox child, CUDA only).

Baselines at their best: the eager module, torch.compile(module, dynamic=False) and the native
fused op (F.rms_norm) where torch has one, TF32 on and deterministic algorithms off (restored
after). Each figure is triton.testing.do_bench's median, A/B interleaved over rounds, with
input buffers rotated through more than the L2 so the cache is not what is timed. Small shapes,
where launch overhead dominates, are also timed by CUDA-graph replay (GPU time alone).
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable

import torch

from services.core.pb import events_pb2 as pb

ROUNDS = 3  # A/B interleaved: each round times every function once
GRAPH_MAX_ROWS = 256  # shapes up to this many rows are launch-bound: time them in a CUDA graph too
GRAPH_CALLS = 20
MAX_BUFFERS = 32


def _bench(fn: Callable[[], object]) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=100, return_mode="median")) * 1000.0


def _rotating(fn: Callable[[torch.Tensor], object], buffers: list[torch.Tensor]) -> Callable[[], object]:
    cycle = itertools.cycle(buffers)
    return lambda: fn(next(cycle))


def _graph_us(fn: Callable[[torch.Tensor], object], x: torch.Tensor) -> float:
    """GPU time per call from replaying GRAPH_CALLS calls captured in one CUDA graph (median of replays)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn(x)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(GRAPH_CALLS):
            fn(x)
    times = []
    for _ in range(20):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / GRAPH_CALLS)
    return statistics.median(times)


def _baselines(module: torch.nn.Module, width: int, eps: float | None) -> dict[str, Callable | None]:
    try:
        compiled = torch.compile(module, dynamic=False)
    except Exception:  # no compiler here: the row records 0
        compiled = None
    native = None
    rms_norm = getattr(torch.nn.functional, "rms_norm", None)
    weight = getattr(module, "weight", None)
    if rms_norm is not None and isinstance(weight, torch.Tensor):
        native = lambda x: rms_norm(x, (width,), weight, eps)  # noqa: E731
    return {"eager": module, "compile": compiled, "native": native}


def _time_shape(
    candidate: Callable, baselines: dict[str, Callable | None], shape: tuple[int, ...], dtype: torch.dtype, l2: int
) -> pb.TimingRow:
    one = torch.randn(shape, device="cuda", dtype=dtype)
    n = max(1, min(MAX_BUFFERS, -(-4 * l2 // max(1, one.numel() * one.element_size()))))
    buffers = [one] + [torch.randn_like(one) for _ in range(n - 1)]
    fns: dict[str, Callable] = {"candidate": candidate}
    for name, fn in baselines.items():
        if fn is None:
            continue
        try:
            fn(one)  # compile / warm up; a baseline that cannot run this shape is left out
            fns[name] = fn
        except Exception:
            continue
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(ROUNDS):
        for name, fn in fns.items():
            samples[name].append(_bench(_rotating(fn, buffers)))
    us = {name: statistics.median(values) for name, values in samples.items()}
    row = pb.TimingRow(
        shape="x".join(str(d) for d in shape),
        candidate_us=us["candidate"],
        eager_us=us.get("eager", 0.0),
        compile_us=us.get("compile", 0.0),
        native_us=us.get("native", 0.0),
    )
    rows = one.numel() // shape[-1]
    if rows <= GRAPH_MAX_ROWS:
        row.candidate_graph_us = _graph_us(candidate, one)
        row.eager_graph_us = _graph_us(baselines["eager"], one)
    return row


def time_candidate(
    module: torch.nn.Module,
    candidate: Callable[[torch.Tensor], torch.Tensor],
    shapes: list[tuple[int, ...]],
    dtype: torch.dtype,
    eps: float | None,
) -> pb.TimingEvidence:
    """One TimingRow per shape; TF32/determinism settings are restored afterwards."""
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    l2 = int(getattr(props, "L2_cache_size", 50 << 20))
    saved = (
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.are_deterministic_algorithms_enabled(),
    )
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.use_deterministic_algorithms(False)
    try:
        baselines = _baselines(module, shapes[0][-1], eps)
        with torch.no_grad():
            rows = [_time_shape(candidate, baselines, shape, dtype, l2) for shape in shapes]
        torch.cuda.synchronize()  # a kernel that faulted the GPU shows here, not as a number
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[0], saved[1]
        torch.use_deterministic_algorithms(saved[2])
    return pb.TimingEvidence(measured=True, rows=rows, device_name=props.name)
