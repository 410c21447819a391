"""The stack every end-to-end test runs against: a real nats-server and the five services as processes."""

from __future__ import annotations

import uuid

import pytest

from services.core.nats_launcher import free_port
from services.core.settings import Settings
from services.core.stack import start_stack
from services.registry import SERVICES


@pytest.fixture
def stack(own_nats, tmp_path):
    settings = Settings(
        nats_url=own_nats.url,
        data_dir=tmp_path / "data",
        server_addr=f"127.0.0.1:{free_port()}",
        model="tiny-qwen2",
        device="cpu",
        ack_wait_s=4.0,
        log_level="INFO",
        admin_token="e2e-" + uuid.uuid4().hex,  # the profiler must send it, or no run gets a profile
    )
    stack = start_stack(settings, SERVICES)
    yield stack
    stack.stop()
    for name in SERVICES:  # shown by pytest only when the test fails
        print(f"----- {name} log -----\n{stack.log_tail(name, 40)}")
