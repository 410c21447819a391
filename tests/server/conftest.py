"""Fixtures for the server tests: a tiny live model behind a real Engine, and the Triton RMSNorm contract."""

from __future__ import annotations

from pathlib import Path

import pytest
from server_fixtures import HERE, rmsnorm_contract

from services.core.pb import events_pb2 as pb
from services.server.engine import Engine
from services.server.models import load_model


@pytest.fixture(scope="module")
def engine():
    """tiny-qwen2 on the CPU, one per test file: swaps in one file cannot leak into another."""
    e = Engine(load_model("tiny-qwen2", "cpu"))
    yield e
    e.close()


@pytest.fixture
def contract() -> pb.Contract:
    return rmsnorm_contract()


@pytest.fixture
def good_source() -> str:
    return (HERE / "rmsnorm_kernel.py").read_text()


@pytest.fixture
def wrong_source() -> str:
    return (HERE / "rmsnorm_kernel_no_weight.py").read_text()


@pytest.fixture
def short_rows_source() -> str:
    """The honest kernel with a bug that parity's short canary never meets: more than 16 rows fail."""
    return (HERE / "rmsnorm_kernel_short_rows.py").read_text()


@pytest.fixture
def kernel_path() -> Path:
    return HERE / "rmsnorm_kernel.py"


@pytest.fixture
def wrong_kernel_path() -> Path:
    return HERE / "rmsnorm_kernel_no_weight.py"
