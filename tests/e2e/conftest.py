"""The stack every end-to-end test runs against: a real nats-server and the five services as processes."""

from __future__ import annotations

import pytest
from e2e_stack import running_stack


@pytest.fixture
def stack(own_nats, tmp_path):
    yield from running_stack(own_nats, tmp_path)
