"""A run measures what users get: the five services as processes on the tiny CPU model, the profiler a client of the
live server's Generate before and after the run's swap. The swapped kernel runs in the Triton interpreter, far slower
than eager, so the served load after is worse beyond its interval: under a policy that acts on it the run rolls its
swap back (the profiler's RollbackRequested, answered by the server), records the figures and the verdict in its
RunCompleted, debits the skill behind the swap, and replays byte for byte; `yantra runs` shows the figures."""

from __future__ import annotations

import uuid

import pytest
from e2e_stack import request, services_alive, yantra_for
from runlog import wait_for_log

from services.core import events as ev
from services.core.pb import events_pb2 as pb
from services.core.server_client import wait_ready

pytestmark = pytest.mark.e2e
# Not cpu-untimed: a policy whose regressions roll back, as on a GPU (served_verdict.acts_on).
ACTING = pb.SwapPolicy(min_reward=1, name="served-test", reason="test: a correct kernel may swap; served figures act")


def _rolled_back(log: list[ev.Recorded]) -> bool:
    return any(r.type == "SwapRolledBack" for r in log) or any(r.type in ("RunFailed", "RunCancelled") for r in log)


async def test_a_run_rolls_back_a_swap_that_made_the_served_load_worse(stack, own_bus):
    await wait_ready(
        stack.settings.server_addr, timeout=120, still_starting=lambda: stack.procs["server"].poll() is None
    )
    run_id = "served-" + uuid.uuid4().hex[:8]
    await request(own_bus, run_id, policy=ACTING, max_candidates=1, prompts=["Hello there"], decode_tokens=4,
                  served_streams=[1, 2])  # fmt: skip
    log = await wait_for_log(own_bus, run_id, _rolled_back, 400, check=services_alive(stack))
    profile = ev.first(log, "ProfileCaptured").msg
    before = profile.observed.served_before
    assert list(before.plan.streams) == [1, 2] and before.device == "cpu"
    assert all(lv.repeats and not any(r.failed for r in lv.repeats) for lv in before.levels)

    done = ev.first(log, "RunCompleted").msg
    committed = ev.first(log, "SwapCommitted").msg
    served = done.served
    assert [lv.streams for lv in served.levels] == [1, 2] and len(done.observed.served_after.levels) == 2
    assert done.outcome == "rolled_back" and list(served.rollback_swaps) == [committed.swap_id], served.verdict
    assert served.regressions and served.verdict.startswith(f"rolled back {committed.swap_id}: ")
    one = served.levels[0].figures[0]
    assert done.tokens_per_s_before == one.before.mean and done.tokens_per_s_after == one.after.mean

    asked = next(r for r in log if r.type == "RollbackRequested")
    assert asked.env.producer == "profiler" and asked.env.causation_id == ev.first(log, "RunCompleted").env.event_id
    assert asked.msg.reason.startswith("the run's served load is worse after its swaps: " + served.regressions[0])
    rolled = next(r for r in log if r.type == "SwapRolledBack")
    assert rolled.msg.swap_id == committed.swap_id and rolled.env.causation_id == asked.env.event_id

    # the skill the swapped kernel's recipe became (published at +1) takes a losing pull for it
    def answered(lg: list[ev.Recorded]) -> bool:
        return any(r.type == "SkillCredited" and r.env.causation_id == rolled.env.event_id for r in lg)

    log = await wait_for_log(own_bus, run_id, answered, 60, check=services_alive(stack))
    debit = next(r for r in log if r.type == "SkillCredited" and r.env.causation_id == rolled.env.event_id).msg
    published = next(r.msg for r in log if r.type == "SkillPublished")
    assert (debit.skill_id, debit.reward) == (published.skill_id, -1), debit
    assert "rolled back by its run's served verdict" in debit.reason, debit.reason

    yantra = yantra_for(stack)
    replay = yantra("replay", run_id, "--verify")
    assert replay.returncode == 0, replay.stdout + replay.stderr
    runs = yantra("runs").stdout
    assert f"{run_id}  tiny-qwen2" in runs and "rolled_back" in runs, runs
    assert "    served 1 streams: " in runs and f"    rolled back {committed.swap_id}: " in runs, runs
    assert "log: rolled back" in yantra("swaps").stdout
