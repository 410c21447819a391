"""The restart budget of `yantra up`: a limit per sliding window, backoff between restarts (made-up times)."""

from __future__ import annotations

import pytest

from services.core.restart_budget import RestartBudget


def _crash_and_restart(budget: RestartBudget, name: str, at: float) -> str:
    """The process exits at `at`; the supervisor polls every 0.5 s until the restart is due. Returns the action
    that ended it ("restart" or "give_up")."""
    now = at
    while True:
        decision = budget.on_dead(name, now)
        if decision.action == "give_up":
            return "give_up"
        if decision.action == "restart":
            budget.restarted(name, now)
            return "restart"
        now += 0.5


def test_the_budget_is_per_window_not_per_lifetime():
    budget = RestartBudget(limit=3, window_s=60, backoff_s=0.5, backoff_max_s=4, stable_s=10)
    # one crash every 30 s for an hour: never more than 2 restarts in any 60 s, so never given up
    for i in range(120):
        assert _crash_and_restart(budget, "coder", 30.0 * i) == "restart", i


def test_limit_plus_one_exits_within_the_window_give_up():
    budget = RestartBudget(limit=3, window_s=60, backoff_s=0.5, backoff_max_s=4, stable_s=10)
    assert [_crash_and_restart(budget, "coder", t) for t in (0, 5, 10)] == ["restart"] * 3
    decision = budget.on_dead("coder", 15)
    assert decision.action == "give_up" and decision.restarts_in_window == 3
    # once the oldest restart has left the window, the same exit may be restarted again
    assert budget.on_dead("coder", 60.5).action in ("restart", "wait")


def test_the_window_slides():
    budget = RestartBudget(limit=2, window_s=10, backoff_s=0, backoff_max_s=0, stable_s=100)
    for t in (0, 6, 12, 18, 24):  # each restart leaves the window before the one after next
        assert _crash_and_restart(budget, "judge", t) == "restart", t
    assert budget.on_dead("judge", 25).action == "give_up"  # 18 and 24 are in (15, 25]


def test_backoff_doubles_for_quick_exits_is_capped_and_resets_after_a_stable_run():
    budget = RestartBudget(limit=100, window_s=1000, backoff_s=0.5, backoff_max_s=3, stable_s=20)
    budget.started("server", 0)
    delays = []
    now = 1.0
    for _ in range(6):  # exits right after each start
        decision = budget.on_dead("server", now)
        assert decision.first
        delays.append(decision.due - now)
        now = decision.due
        budget.restarted("server", now)
        now += 1.0
    assert delays == [0.0, 0.5, 1.0, 2.0, 3.0, 3.0]
    # it then stays up longer than stable_s: the next exit restarts at once
    now += 25
    decision = budget.on_dead("server", now)
    assert decision.action == "restart" and decision.due == now


def test_a_restart_in_backoff_is_deferred_not_dropped():
    budget = RestartBudget(limit=5, window_s=100, backoff_s=2, backoff_max_s=10, stable_s=50)
    budget.started("profiler", 0)
    assert _crash_and_restart(budget, "profiler", 1) == "restart"  # first quick exit: no wait
    first = budget.on_dead("profiler", 2)
    assert first.action == "wait" and first.first and first.due == 4
    again = budget.on_dead("profiler", 3)  # polled again: still the same pending restart
    assert again.action == "wait" and not again.first and again.due == 4
    assert budget.on_dead("profiler", 4).action == "restart"
    assert budget.on_dead("profiler", 4.5).action == "restart"  # asked until the caller restarts it
    budget.restarted("profiler", 4.5)
    assert budget.restarts_in_window("profiler", 4.5) == 2


def test_processes_have_budgets_of_their_own():
    budget = RestartBudget(limit=1, window_s=100, backoff_s=0, backoff_max_s=0)
    assert _crash_and_restart(budget, "coder", 0) == "restart"
    assert _crash_and_restart(budget, "nats-server", 1) == "restart"
    assert budget.on_dead("coder", 2).action == "give_up"
    assert budget.on_dead("nats-server", 2).action == "give_up"


def test_a_limit_of_zero_never_restarts():
    assert RestartBudget(limit=0).on_dead("server", 0).action == "give_up"


def test_from_env_reads_limit_window_and_backoff_cap():
    budget = RestartBudget.from_env(
        {"YANTRA_RESTART_LIMIT": "2", "YANTRA_RESTART_WINDOW_S": "7.5", "YANTRA_RESTART_BACKOFF_MAX_S": "1"}
    )
    assert (budget.limit, budget.window_s, budget.backoff_max_s) == (2, 7.5, 1.0)
    default = RestartBudget.from_env({})
    assert (default.limit, default.window_s) == (RestartBudget().limit, RestartBudget().window_s)
    with pytest.raises(ValueError, match="YANTRA_RESTART_LIMIT='many' is not an integer"):
        RestartBudget.from_env({"YANTRA_RESTART_LIMIT": "many"})
    with pytest.raises(ValueError, match="window must be positive"):
        RestartBudget.from_env({"YANTRA_RESTART_WINDOW_S": "0"})
