"""A three-node nats-server cluster whose leaders are SIGKILLed mid-work: nothing published is lost or stored twice,
set-up goes through the election, and a durable consumer keeps receiving. Real processes, real elections (4-9 s
each), so every test here is slow."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections import Counter

import pytest

from services.core import events as ev
from services.core.bus import Bus
from services.core.nats_cluster import LocalCluster, start_cluster
from services.core.pb import events_pb2 as pb

pytestmark = pytest.mark.slow

NODE_STORE = 4 << 30  # each node's max_file_store: the 1 GiB DLQ fits, the 16 GiB log must halve to fit (10005)
N_EVENTS = 60
KILL_AFTER = 20
OFFLINE_S = 8.0


@pytest.fixture
def cluster(tmp_path):
    c = start_cluster(tmp_path / "cluster", 3, monitor=True, max_file_store=NODE_STORE)
    yield c
    c.stop()


async def _bus(cluster: LocalCluster, name: str) -> Bus:
    return await Bus.connect(cluster.url, name=name, timeout=10.0, replicas=3, retry_s=30.0)


def _event(run_id: str, k: int) -> ev.Envelope:
    msg = pb.SkillCredited(skill_id=f"s{k}", reward=k)
    return ev.make_envelope(run_id, msg, producer="t", time_ns=k, event_id=f"{run_id}-{k}", ordinal=k)


async def _stream_leader(bus: Bus) -> str:
    return (await bus.js.stream_info(ev.RUNS_STREAM)).cluster.leader


def _meta_leader(cluster: LocalCluster) -> str:
    for i, plan in enumerate(cluster.plans):
        if cluster.nodes[i].process.poll() is None:
            with urllib.request.urlopen(f"http://127.0.0.1:{plan.monitor_port}/jsz", timeout=5) as reply:
                return json.load(reply)["meta_cluster"]["leader"]
    raise AssertionError("no node is alive")


async def _publish_killing(bus: Bus, run_id: str, kill) -> float:
    """Publish N_EVENTS events in turn; after KILL_AFTER, `kill()`. The longest single publish, in seconds."""
    longest = 0.0
    for k in range(N_EVENTS):
        if k == KILL_AFTER:
            await kill()
        start = time.monotonic()
        await bus.publish(_event(run_id, k))
        longest = max(longest, time.monotonic() - start)
    return longest


async def _assert_each_once(bus: Bus, run_id: str) -> None:
    got = Counter(r.env.event_id for r in await bus.read_run(run_id))
    assert got == Counter(f"{run_id}-{k}" for k in range(N_EVENTS)), "lost or duplicated events"


async def test_a_publisher_rides_out_the_stream_leader_killed_and_every_event_lands_once(cluster, run_id):
    bus = await _bus(cluster, "publisher")
    try:
        info = await bus.js.stream_info(ev.RUNS_STREAM)
        assert info.config.num_replicas == 3
        assert info.config.max_bytes == 2 << 30  # 16 GiB halved on 10005 until it fit beside the DLQ
        leader = info.cluster.leader

        async def kill():
            cluster.kill(cluster.index_of(leader))

        longest = await _publish_killing(bus, run_id, kill)
        assert longest > 1.0  # it did meet the election, and waited it out
        assert await _stream_leader(bus) != leader
        await _assert_each_once(bus, run_id)
    finally:
        await bus.close()


async def test_a_publisher_and_set_up_ride_out_the_meta_leader_killed(cluster, run_id):
    bus = await _bus(cluster, "publisher")
    try:
        meta = await asyncio.to_thread(_meta_leader, cluster)
        for _ in range(5):  # the stream leader elsewhere: this test is about the meta leader alone
            if await _stream_leader(bus) != meta:
                break
            await bus.nc.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{ev.RUNS_STREAM}", b"", timeout=5)
            await asyncio.sleep(2.0)
        assert await _stream_leader(bus) != meta

        async def kill():
            cluster.kill(cluster.index_of(meta))
            # set-up while the meta group has no leader: streams checked, a durable made
            await bus.ensure_streams()
            stop = asyncio.Event()
            stop.set()  # made, then returns at once
            await bus.consume("after-meta-kill", [ev.run_filter(run_id)], _never, stop)

        await _publish_killing(bus, run_id, kill)
        assert await asyncio.to_thread(_meta_leader, cluster) != meta
        await _assert_each_once(bus, run_id)
        assert (await bus.js.consumer_info(ev.RUNS_STREAM, "after-meta-kill")).config.durable_name
    finally:
        await bus.close()


async def _never(_recorded) -> None:
    raise AssertionError("no event is handled here")


async def test_a_durable_consumer_keeps_receiving_across_the_stream_leader_killed(cluster, run_id):
    publisher = await _bus(cluster, "publisher")
    consumer = await _bus(cluster, "consumer")
    seen: Counter = Counter()
    all_seen = asyncio.Event()

    async def handle(recorded) -> None:
        seen[recorded.env.event_id] += 1
        if len(seen) == N_EVENTS:
            all_seen.set()

    stop = asyncio.Event()
    consuming = asyncio.create_task(consumer.consume("cluster-durable", [ev.run_filter(run_id)], handle, stop))
    try:
        await asyncio.sleep(1.0)  # the durable made before the first event
        leader = await _stream_leader(publisher)

        async def kill():
            cluster.kill(cluster.index_of(leader))

        await _publish_killing(publisher, run_id, kill)
        await asyncio.wait_for(all_seen.wait(), 60.0)
        assert set(seen) == {f"{run_id}-{k}" for k in range(N_EVENTS)}
        assert not consuming.done()  # it never failed
    finally:
        stop.set()
        await asyncio.wait_for(consuming, 10.0)
        await publisher.close()
        await consumer.close()


async def test_streams_are_made_once_a_missing_node_joins(cluster):
    """With one of three nodes down no stream of three replicas can be placed — even with no byte limit the server
    answers 10005, "no suitable peers", which is also its answer to a disk too small: set-up must not take it for a
    stream made meanwhile (it asked for the stream, got 404, and failed once in CI). It rides it out until the
    node is back."""
    cluster.kill(2)
    await asyncio.sleep(OFFLINE_S)  # the meta leader marks the node offline: until then it would place on it
    connecting = asyncio.create_task(_bus(cluster, "early"))
    await asyncio.sleep(4.0)
    assert not connecting.done(), connecting  # still trying, not failed
    await asyncio.to_thread(cluster.restart, 2)
    bus = await asyncio.wait_for(connecting, 60.0)
    try:
        info = await bus.js.stream_info(ev.RUNS_STREAM)
        assert info.config.num_replicas == 3 and len(info.cluster.replicas or []) == 2  # the leader and two copies
    finally:
        await bus.close()


async def test_with_no_quorum_a_publish_gives_up_once_its_retry_budget_is_spent(cluster, run_id):
    bus = await _bus(cluster, "publisher")  # made with the default budget: the cluster is still electing
    bus.retry_s = 2.0
    try:
        await bus.publish(_event(run_id, 0))
        survivor = cluster.index_of(await _stream_leader(bus))
        for i in range(3):
            if i != survivor:
                cluster.kill(i)
        start = time.monotonic()
        with pytest.raises(Exception):  # noqa: B017 - no responders or a timeout: either way it stops trying
            await bus.publish(_event(run_id, 1))
        assert time.monotonic() - start < 2.0 + 10.0 + 3.0  # the budget, one last try's timeout, slack
    finally:
        await bus.close()


def test_a_command_on_a_cluster_stacks_data_dir_makes_streams_with_its_replicas(tmp_path, monkeypatch):
    """`yantra up --cluster 3` records its replicas in stack.json: a command that connects first (and so makes the
    streams) makes them with three copies, not the server's default of one; NATS_URL (someone else's) overrides."""
    import argparse
    import os

    from services.cli.common import settings_of

    for var in ("NATS_URL", "YANTRA_NATS_REPLICAS", "YANTRA_DATA_DIR"):
        monkeypatch.delenv(var, raising=False)
    info = {"pid": os.getpid(), "nats_url": "nats://127.0.0.1:1,nats://127.0.0.1:2", "nats_replicas": 3}
    (tmp_path / "stack.json").write_text(json.dumps(info))
    args = argparse.Namespace(data_dir=str(tmp_path))
    assert settings_of(args).nats_replicas == 3
    assert settings_of(args, client=False).nats_replicas is None  # `up` itself decides its own
    monkeypatch.setenv("NATS_URL", "nats://elsewhere:4222")
    assert settings_of(args).nats_replicas is None
