"""The served-load measure over the real gRPC server on the tiny model (CPU): Generate at each level, repeated until
every figure's interval converged or the plan's repeats were spent; and an old recorded run whose profile holds no
served figures still re-derives its RunCompleted byte for byte by the batch-1 rule of its time."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.core.logfile import read_log
from services.core.pb import events_pb2 as pb
from services.core.replay import verify
from services.profiler import domain, served_plan, served_stats
from services.profiler.served_load import ID_HIGH, ID_LOW, ServedLoadClient, prompt_ids
from services.server.engine import Engine
from services.server.grpc_api import start_grpc
from services.server.models import load_model

RECORDED = Path(__file__).resolve().parents[1] / "tui" / "data" / "real_run.jsonl"


@pytest.fixture(scope="module")
def engine():
    e = Engine(load_model("tiny-qwen2", "cpu"))
    yield e
    e.close()


@pytest.fixture
async def server(engine):
    srv, port = await start_grpc(engine, "127.0.0.1:0")
    yield f"127.0.0.1:{port}"
    await srv.stop(0)


async def test_the_measure_repeats_each_level_over_generate_until_its_interval_is_measured(server, engine):
    plan = served_plan.plan_for(pb.RunRequested(served_streams=[1, 3]), "cpu")
    served_before = engine.stats.requests_served
    observed = await ServedLoadClient(server).measure(plan, "cpu")
    assert observed.plan == plan and observed.device == "cpu"
    assert [lv.streams for lv in observed.levels] == [1, 3]
    sent = 0
    for level in observed.levels:
        repeats = len(level.repeats)
        assert plan.min_repeats <= repeats <= plan.max_repeats
        # it stopped at the first repeat where the level was done, not later
        assert served_stats.level_done(level, plan)
        shorter = pb.ServedLevel(streams=level.streams, repeats=level.repeats[:-1])
        assert repeats == plan.min_repeats or not served_stats.level_done(shorter, plan)
        for r in level.repeats:
            assert r.requests == level.streams * plan.requests_per_stream and r.failed == 0
            assert r.tokens_per_s > 0 and r.ttft_p99_ms > 0 and r.itl_p99_ms > 0 and r.wall_s > 0
        sent += level.streams * (1 + plan.requests_per_stream * repeats)  # a warm-up round, then the repeats
    assert engine.stats.requests_served - served_before == sent  # every request went through the served API
    assert observed.graphs_stale == 0 and observed.graphs_wait_s < 5  # a CPU steps eagerly: no graph to wait for


async def test_the_measure_waits_for_the_servers_stale_graphs_and_records_how_many_it_met(server, engine, monkeypatch):
    # the engine's own count stands in for graphs a GPU's idle engine captures after a swap (a CPU captures none)
    left = iter([3, 2, 1, 0])
    monkeypatch.setattr(engine, "graphs_stale", lambda: next(left, 0))
    plan = served_plan.plan_for(pb.RunRequested(served_streams=[1]), "cpu")
    observed = await ServedLoadClient(server).measure(plan, "cpu")
    assert observed.graphs_stale == 0 and observed.graphs_wait_s >= 3 * 0.2 and next(left, None) is None
    monkeypatch.setattr(engine, "graphs_stale", lambda: 5)  # never captured: the wait ends and says so
    observed = await ServedLoadClient(server, graphs_wait_s=0.5).measure(plan, "cpu")
    assert observed.graphs_stale == 5 and 0.5 <= observed.graphs_wait_s < 5 and len(observed.levels) == 1


def test_the_load_is_seeded_the_same_before_and_after():
    plan = served_plan.plan_for(None, "cpu")
    ids = prompt_ids(plan, "4:0:1")
    assert ids == prompt_ids(plan, "4:0:1") and ids != prompt_ids(plan, "4:0:2")
    assert len(ids) == plan.input_tokens and all(ID_LOW <= i < ID_HIGH for i in ids)


def test_an_old_recorded_run_keeps_its_batch_one_figures_byte_for_byte():
    log = read_log(RECORDED)
    completed = next(r for r in log if r.type == "RunCompleted")
    assert completed.env.schema_version < 11 and not completed.msg.HasField("served")
    mine = [m for m in verify(log, domain.REDERIVE) if m.type in domain.REDERIVE]
    assert mine == []  # its ProfileCaptured and RunCompleted re-derive exactly (the other services' are theirs)
    index = log.index(completed)
    cause = next(r for r in log if r.env.event_id == completed.env.causation_id)
    again = domain.derive_run_completed(log[: log.index(cause) + 1], cause, completed.msg.observed)
    assert again.SerializeToString(deterministic=True) == completed.env.payload and index == len(log) - 1
