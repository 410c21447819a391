"""Helpers for the skill store tests: run logs built the way the runner builds them, and profiles of norms."""

from __future__ import annotations

import pytest
from runlog import RunLog

from services.core import events as ev
from services.core.pb import events_pb2 as pb
from services.profiler import domain as profiler_domain

CONFIG = pb.TemplateConfig(template="row_reduction_onepass", num_warps=4, rows_per_program=1)


def norm_observation(class_path: str, width: int, dtype: str = "bfloat16") -> pb.ProfileObservation:
    """A decode-time profile whose one leaf is an RMSNorm-shaped class of `width` (plus a matmul)."""
    elem = 2 if dtype == "bfloat16" else 4
    norm = pb.ModuleClassProfile(
        introspection=pb.ModuleIntrospection(
            class_path=class_path,
            leaf=True,
            attributes=[
                pb.ModuleAttribute(name="weight", kind="parameter", shape=[width], dtype=dtype),
                pb.ModuleAttribute(name="eps", kind="float", value=1e-6),
            ],
        ),
        instances=57,
        calls=570,
        total_time_us=5_700.0,
        input_shape=[1, 1, width],
        dtype=dtype,
        param_bytes=width * elem,
        input_bytes=width * elem,
        output_bytes=width * elem,
    )
    linear = pb.ModuleClassProfile(
        introspection=pb.ModuleIntrospection(
            class_path="torch.nn.modules.linear.Linear",
            leaf=True,
            attributes=[pb.ModuleAttribute(name="weight", kind="parameter", shape=[width, width], dtype=dtype)],
        ),
        instances=196,
        calls=1960,
        total_time_us=30_000.0,
        input_shape=[1, 1, width],
        dtype=dtype,
        param_bytes=width * width * elem,
        input_bytes=width * elem,
        output_bytes=width * elem,
    )
    hw = pb.HardwareFigures(device="cuda", device_name="H200", peak_bytes_per_s=4.275e12, peak_flops=7.9e14)
    return pb.ProfileObservation(
        model="m", dtype=dtype, hardware=hw, modules=[norm, linear], captured_time_us=60_000.0, decode_tokens_per_s=30
    )


def profiled_run(run: RunLog, class_path: str, width: int) -> ev.Recorded:
    """RunRequested and the profiler's (derived) ProfileCaptured for a norm of `width`; returns the latter."""
    req = run.add(pb.RunRequested(prompts=["hi"], decode_tokens=4), "client")
    msg = profiler_domain.derive_profile_captured(run.log, req, norm_observation(class_path, width))
    assert msg.target_class == class_path, msg.reason
    return run.add(msg, "profiler", req)


@pytest.fixture
def new_run():
    return RunLog


@pytest.fixture
def profiled():
    return profiled_run


@pytest.fixture
def config() -> pb.TemplateConfig:
    out = pb.TemplateConfig()
    out.CopyFrom(CONFIG)
    return out


@pytest.fixture
def observation_of():
    return norm_observation
