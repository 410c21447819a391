"""What a run's served-load measure asks of the live server, pure: the levels (streams), the requests and the
repeats, by device unless the run asked for its own levels (`RunRequested.served_streams`).

The plan is recorded in the 'before' measure (ProfileCaptured.observed.served_before.plan) and the 'after' measure
runs the same plan, so the two meet the same seeded load.
"""

from __future__ import annotations

from services.core.pb import events_pb2 as pb

# The levels issue 27 measured users at on the H200 (1, 16 and 64 concurrent streams, 64 prompt tokens, 128 new):
# batch 1, a busy batch, and the server's admission limit (YANTRA_MAX_REQUESTS, 64).
GPU_STREAMS = (1, 16, 64)
# A CPU serves the tiny presets at a few hundred tokens a second: two small levels keep a run's measure to seconds.
CPU_STREAMS = (1, 4)
# At most this many streams a level: the server answers more than YANTRA_MAX_REQUESTS (64) at once
# RESOURCE_EXHAUSTED, and a level of refusals measures nothing.
MAX_STREAMS = 64
MAX_LEVELS = 4
# Converged: every figure's 95% half-width within 10% of its mean. p99 latencies over one repeat's requests move
# more than throughput does; 10% is reachable in a few repeats of the default load and still tells a regression
# like issue 27's (64-stream throughput 13% lower, TTFT p99 up 70%) from noise.
TARGET_HALF_WIDTH = 0.10
SEED = 27


def default_streams(device: str) -> tuple[int, ...]:
    return GPU_STREAMS if device == "cuda" else CPU_STREAMS


def streams_problem(streams: list[int] | tuple[int, ...]) -> str:
    """Why a run's own served levels cannot be measured ("" when they can)."""
    if len(streams) > MAX_LEVELS:
        return f"{len(streams)} served-load levels asked, at most {MAX_LEVELS}"
    bad = [s for s in streams if not 1 <= s <= MAX_STREAMS]
    if bad:
        return f"served-load levels must be 1..{MAX_STREAMS} streams (the server's admission limit); got {bad}"
    if len(set(streams)) != len(streams):
        return f"served-load levels repeat: {list(streams)}"
    return ""


def plan_for(request: pb.RunRequested | None, device: str) -> pb.ServedLoadPlan:
    """The served-load plan of a run on `device` ("cuda", "cpu"): its own levels if it asked, else the device's."""
    streams = list(request.served_streams) if request is not None and request.served_streams else []
    if device == "cuda":
        plan = pb.ServedLoadPlan(
            requests_per_stream=2, input_tokens=64, output_tokens=128, min_repeats=3, max_repeats=10
        )
    else:  # a CPU, or anything not a GPU: small requests, few repeats (the tests run this)
        plan = pb.ServedLoadPlan(requests_per_stream=2, input_tokens=8, output_tokens=8, min_repeats=3, max_repeats=5)
    plan.streams.extend(streams or default_streams(device))
    plan.target_half_width = TARGET_HALF_WIDTH
    plan.seed = SEED
    return plan
