"""A run on the stack `yantra up --cluster 3` starts, with the stream leader SIGKILLed while the judge works: the run
completes with every trigger answered once, no event stored twice, and `yantra replay RUN --verify` passes."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest
from e2e_stack import request, services_alive, yantra_for
from runlog import has, wait_for_log

from services.core import events as ev
from services.core.bus import Bus
from services.core.nats_launcher import free_port
from services.core.server_client import wait_ready
from services.core.settings import Settings
from services.core.stack import start_stack
from services.registry import SERVICES

pytestmark = pytest.mark.e2e
RUN_TIMEOUT_S = 420


@pytest.fixture
def cluster_stack(tmp_path):
    settings = Settings(
        data_dir=tmp_path / "data",
        server_addr=f"127.0.0.1:{free_port()}",
        model="tiny-qwen2",
        device="cpu",
        ack_wait_s=4.0,
        log_level="INFO",
        admin_token="e2e-" + uuid.uuid4().hex,
    )
    stack = start_stack(settings, SERVICES, cluster=3)
    yield stack
    stack.stop()
    for name in SERVICES:  # shown by pytest only when the test fails
        print(f"----- {name} log -----\n{stack.log_tail(name, 40)}")


async def test_a_run_completes_once_across_the_stream_leader_killed(cluster_stack):
    stack = cluster_stack
    assert stack.nats is None and stack.nats_url.count(",") == 2
    settings = stack.settings
    await wait_ready(settings.server_addr, timeout=120, still_starting=lambda: stack.procs["server"].poll() is None)
    bus = await Bus.connect(stack.nats_url, name="e2e", timeout=10.0, auth=settings.nats_auth())
    try:
        run_id = "e2e-" + uuid.uuid4().hex[:8]
        await request(bus, run_id, max_candidates=1, prompts=["Hello there"], decode_tokens=4)
        await wait_for_log(bus, run_id, has("CandidateProposed"), 180, check=services_alive(stack))
        info = await bus.js.stream_info(ev.RUNS_STREAM)
        assert info.config.num_replicas == 3
        stack.cluster.kill(stack.cluster.index_of(info.cluster.leader))  # while the judge works

        log = await wait_for_log(bus, run_id, has("RunCompleted"), RUN_TIMEOUT_S, check=services_alive(stack))
        assert (await bus.js.stream_info(ev.RUNS_STREAM)).cluster.leader != info.cluster.leader
        types = Counter(r.type for r in log)
        assert types["RunCompleted"] == 1 and types["SwapCommitted"] == 1, types
        assert len({r.env.event_id for r in log}) == len(log), "an event stored twice"
        answers = Counter((r.env.causation_id, r.env.producer) for r in log if r.env.causation_id)
        owed = {(r.env.causation_id, r.env.producer): r.env.answers or 1 for r in log if r.env.causation_id}
        assert answers == owed, (answers, owed)
    finally:
        await bus.close()

    replayed = yantra_for(stack)("replay", run_id, "--verify")
    assert replayed.returncode == 0 and "replay verified" in replayed.stdout, replayed.stdout + replayed.stderr
