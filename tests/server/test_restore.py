"""A restarted server re-applies the swaps its log holds as committed, through the same checks."""

from __future__ import annotations

import time

from server_fixtures import QWEN_NORM, swap_run

from services.core import events as ev
from services.core.bus import Bus
from services.core.pb import events_pb2 as pb
from services.core.replay import verify
from services.core.runner import answer
from services.core.swaplog import find_swap, live_swaps, read_swap_events, swap_history
from services.server.domain import REDERIVE
from services.server.engine import Engine
from services.server.hotswap import is_patched
from services.server.introspection import instances_of
from services.server.models import load_model
from services.server.restore import restore_swaps
from services.server.service import ServerService


def _server_mismatches(log: list[ev.Recorded]) -> list[str]:
    """Replay's verdict on the server's events (the fixture writes the coder's and judge's by hand)."""
    return [str(m) for m in verify(log, REDERIVE) if m.type in REDERIVE]


async def _commit(bus: Bus, engine: Engine, run_id: str, source: str, tmp_path) -> ev.Recorded:
    for env in swap_run(run_id, source):
        await bus.publish(env)
    log = await bus.read_run(run_id)
    await answer(bus, ServerService(engine, tmp_path), ev.last(log, "TargetConcluded"))
    return ev.last(await bus.read_run(run_id), "SwapCommitted")


async def test_a_restarted_server_serves_the_committed_swap_again(own_bus, good_source, tmp_path):
    first = Engine(load_model("tiny-qwen2", "cpu"))
    ids = first.encode("Hello there")
    before, _ = await first.exclusive(first.decode, ids, 8)
    committed = await _commit(own_bus, first, "restore-1", good_source, tmp_path)
    assert committed is not None and committed.msg.modules_patched == 5
    first.close()

    restarted = Engine(load_model("tiny-qwen2", "cpu"))  # fresh weights, stock forwards
    assert not any(is_patched(m) for m in instances_of(restarted.model, QWEN_NORM))
    service = ServerService(restarted, tmp_path)
    assert await restore_swaps(own_bus, service, "tiny-qwen2") == [committed.msg.swap_id]
    assert all(is_patched(m) for m in instances_of(restarted.model, QWEN_NORM))
    assert (await restarted.exclusive(restarted.decode, ids, 8))[0] == before
    assert [r.state for r in service.swaps.records()] == ["committed"]
    log = await own_bus.read_run("restore-1")
    reapplied = ev.last(log, "SwapReapplied")
    assert reapplied.msg.restored and reapplied.msg.swap_id == committed.msg.swap_id
    assert reapplied.env.causation_id == committed.env.event_id and reapplied.msg.reason.startswith("re-applied on 5")
    assert _server_mismatches(log) == []

    other = Engine(load_model("tiny-llama", "cpu"))  # another model: nothing of it applies
    assert await restore_swaps(own_bus, ServerService(other, tmp_path), "tiny-llama") == []
    restarted.close()
    other.close()


async def test_a_rolled_back_swap_stays_rolled_back(own_bus, good_source, tmp_path):
    engine = Engine(load_model("tiny-qwen2", "cpu"))
    committed = await _commit(own_bus, engine, "restore-2", good_source, tmp_path)
    rollback = pb.RollbackRequested(swap_id=committed.msg.swap_id, reason="test")
    await own_bus.publish(ev.make_envelope("restore-2", rollback, producer="test", time_ns=time.time_ns()))
    request = ev.last(await own_bus.read_run("restore-2"), "RollbackRequested")
    await answer(own_bus, ServerService(engine, tmp_path), request)
    engine.close()

    restarted = Engine(load_model("tiny-qwen2", "cpu"))
    assert await restore_swaps(own_bus, ServerService(restarted, tmp_path), "tiny-qwen2") == []
    assert not any(is_patched(m) for m in instances_of(restarted.model, QWEN_NORM))
    restarted.close()


async def test_every_restart_records_what_it_re_applied_and_what_it_could_not(own_bus, good_source, tmp_path):
    """Two runs each committed a swap of the same target (a demo does not re-apply the swaps of earlier runs):
    a restart serves the newer and says in the older's run that it is superseded, so the log never says
    "live" for a kernel no one serves without saying why. Each restart adds its own answers."""
    swaps = {}
    for run_id in ("restore-old", "restore-new"):
        engine = Engine(load_model("tiny-qwen2", "cpu"))
        swaps[run_id] = (await _commit(own_bus, engine, run_id, good_source, tmp_path)).msg.swap_id
        engine.close()

    for restart in range(2):
        engine = Engine(load_model("tiny-qwen2", "cpu"))
        assert await restore_swaps(own_bus, ServerService(engine, tmp_path), "tiny-qwen2") == [swaps["restore-new"]]
        engine.close()
        for run_id, restored in (("restore-new", True), ("restore-old", False)):
            log = await own_bus.read_run(run_id)
            answers = ev.all_of(log, "SwapReapplied")
            assert len(answers) == restart + 1 and len({a.env.event_id for a in answers}) == restart + 1
            assert answers[-1].msg.restored is restored
            assert _server_mismatches(log) == [], run_id

    old = ev.last(await own_bus.read_run("restore-old"), "SwapReapplied").msg
    assert old.reason == f"not re-applied: superseded by the newer {swaps['restore-new']} on {QWEN_NORM}"
    views = {v.run_id: v for v in swap_history(*await read_swap_events(own_bus))}
    assert views["restore-old"].dropped == old.reason and views["restore-new"].dropped == ""
    assert views["restore-old"].rolled_back is None  # still live in the log: the next restart tries again


def test_live_swaps_drops_what_a_rollback_in_its_run_named():
    def rec(seq, msg, run="r"):
        return ev.Recorded(seq, ev.make_envelope(run, msg, producer="server", time_ns=seq, causation_id=str(seq)))

    a, b = rec(1, pb.SwapCommitted(swap_id="swap-a")), rec(2, pb.SwapCommitted(swap_id="swap-b"))
    assert live_swaps([a, b], [rec(3, pb.SwapRolledBack(swap_id="swap-a"))]) == [b]
    assert live_swaps([a, b], []) == [a, b]

    first, second = rec(5, pb.SwapRolledBack(swap_id="swap-b")), rec(6, pb.SwapRolledBack(swap_id="swap-b"))
    views = swap_history([a, b], [first, second])
    assert [(v.swap_id, v.committed.seq, v.rolled_back) for v in views] == [("swap-a", 1, None), ("swap-b", 2, first)]
    assert find_swap(views, "swap-a").run_id == "r" and find_swap(views, "swap-c") is None


def test_an_old_log_whose_swap_id_repeats_across_runs_keeps_each_commit_apart():
    """Before schema 2 a swap id was `swap-<candidate>`: a later run committing the same kernel reused it.

    The rollback of the first run's swap must not end the second run's (which is live and must be re-applied
    after a restart), and `yantra rollback` of the id names the live one.
    """

    def rec(seq, msg, run):
        return ev.Recorded(seq, ev.make_envelope(run, msg, producer="server", time_ns=seq, causation_id=str(seq)))

    old = rec(1, pb.SwapCommitted(swap_id="swap-c1-abc"), "run-1")
    ended = rec(2, pb.SwapRolledBack(swap_id="swap-c1-abc"), "run-1")
    again = rec(3, pb.SwapCommitted(swap_id="swap-c1-abc"), "run-2")
    assert live_swaps([old, again], [ended]) == [again]
    views = swap_history([old, again], [ended])
    assert [(v.run_id, v.rolled_back) for v in views] == [("run-1", ended), ("run-2", None)]
    assert find_swap(views, "swap-c1-abc").run_id == "run-2"
