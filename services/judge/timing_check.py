"""The parent's own check of the timing figures the sandbox child reported (GPU only).

The child measures (it must: the candidate runs there), but its numbers are data: the parent
measures the copy ceiling itself, in a process the candidate never touched, recomputes the bytes
each timed shape must move from the shape and the dtypes, and believes no figure faster than those
bytes at that ceiling allow. The child's own ceiling must agree with the parent's, and the GPU time
the figures account for must fit in the child's wall time. A timing that is not believed caps the
reward at +1 (services.judge.reward).
"""

from __future__ import annotations

from functools import lru_cache

from services.core.pb import events_pb2 as pb
from services.core.shapes import shape_dims
from services.ops import family

SLACK = 0.9  # a figure may beat the floor by 10% (the ceiling is a median; caches help small shapes)
CEILING_AGREEMENT = 0.75  # the child's ceiling within 25% of the parent's, or the child's clock is suspect


@lru_cache(maxsize=2)
def parent_copy_ceiling(reads_per_write: int = 1) -> float:
    """Device-to-device copy bandwidth (bytes read + written per second), measured in the judge's process; for an
    op reading two tensors per one written, torch's binary elementwise op at that mix (as the child measures)."""
    import torch

    src = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    if reads_per_write == 2:
        a, b, c = (t.view(torch.bfloat16) for t in (src, dst, torch.empty_like(src)))
        step, moved = (lambda: torch.mul(a, b, out=c)), 3 * src.numel()
    else:
        step, moved = (lambda: dst.copy_(src)), 2 * src.numel()
    for _ in range(3):
        step()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(10):
        start.record()
        step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    ms = sorted(times)[len(times) // 2]
    return moved / (ms * 1e-3)


def bytes_for(shape: str, x_bytes: int, w_bytes: int, y_bytes: int, family_name: str) -> float:
    """Bytes a call of the op family on the timed `shape` ("AxBxC") must move (the family's count)."""
    return float(family(family_name).timed_bytes(shape_dims(shape), (x_bytes, w_bytes, y_bytes)))


def judge_timing(
    timing: pb.TimingEvidence,
    ceiling: float,
    child_wall_s: float,
    itemsizes: tuple[int, int, int],
    family_name: str,
) -> pb.TimingCheck:
    """Pure: whether the child's figures are believed against the parent's ceiling and wall clock."""
    out = pb.TimingCheck(believed=True, copy_bytes_per_s=ceiling, child_wall_s=child_wall_s)
    reasons = []
    if timing.copy_bytes_per_s > 0 and timing.copy_bytes_per_s < CEILING_AGREEMENT * ceiling:
        reasons.append(
            f"the child's copy ceiling {timing.copy_bytes_per_s / 1e9:.0f} GB/s is far under the parent's "
            f"{ceiling / 1e9:.0f} GB/s"
        )
    timed = 0.0
    for row in timing.rows:
        timed += row.candidate_us + row.eager_us + row.compile_us + row.native_us
        try:
            floor_us = bytes_for(row.shape, *itemsizes, family_name) / ceiling * 1e6
        except ValueError:  # the child's evidence names a shape that is none: nothing in it is believed
            reasons.append(f"a timed shape {row.shape[:40]!r} is not a shape")
            continue
        if row.candidate_us < SLACK * floor_us:
            reasons.append(f"{row.shape}: {row.candidate_us:.2f} us beats the copy floor {floor_us:.2f} us")
    out.timed_us = timed
    if child_wall_s > 0 and timed * 1e-6 > child_wall_s:
        reasons.append(f"the figures account for {timed * 1e-6:.3f} s of GPU time, more than the child ran")
    if reasons:
        out.believed = False
        out.reason = "; ".join(reasons)
    return out


def check(
    timing: pb.TimingEvidence,
    sandbox: pb.SandboxEvidence,
    itemsizes: tuple[int, int, int],
    family_name: str,
) -> pb.TimingCheck:
    reads = getattr(family(family_name), "READS_PER_WRITE", 1)
    return judge_timing(timing, parent_copy_ceiling(reads), sandbox.wall_s, itemsizes, family_name)
