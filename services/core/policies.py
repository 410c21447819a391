"""Swap policies: the reward a judged kernel needs before the server may swap it in, in one place.

A policy is recorded in the run (`RunRequested.policy`, copied into `TargetConcluded.policy`), so replay
reads the one a run was made with; these are the named ones a client picks from, and the fallback the
coder records when a request named none.
"""

from __future__ import annotations

from services.core.pb import events_pb2 as pb

GPU_DEFAULT = pb.SwapPolicy(
    min_reward=2, name="gpu-default", reason="swap only kernels measured > 5% faster than eager"
)
CPU_UNTIMED = pb.SwapPolicy(
    min_reward=1,
    name="cpu-untimed",
    reason="explicit: no GPU, kernels run under TRITON_INTERPRET=1 and cannot be timed; a correct (+1) kernel may swap",
)
# What `yantra optimize --policy NAME` offers.
NAMED = {p.name: p for p in (GPU_DEFAULT, CPU_UNTIMED)}
# Recorded by the coder when a run request set no policy at all (a client other than `yantra`): the GPU
# default's threshold, saying why it applies. Its wording is part of recorded runs, so it stays as it is.
UNREQUESTED = pb.SwapPolicy(
    min_reward=2,
    name="gpu-default",
    reason="the run request set no policy: swap only kernels judged > 5% faster than eager",
)
