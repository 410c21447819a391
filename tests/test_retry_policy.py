"""The election retry policy on its own: how long to wait, what is worth another try, and the loop that obeys."""

from __future__ import annotations

import asyncio

import nats.errors
import pytest
from hypothesis import given
from hypothesis import strategies as st
from nats.js.errors import APIError, BadRequestError, NoStreamResponseError, ServiceUnavailableError

from services.core.retry import FIRST_WAIT_S, MAX_WAIT_S, retry_wait, riding_out, transient
from services.core.settings import Settings, env_bus_options, nats_servers, redact_url


def test_the_wait_doubles_from_the_first_up_to_the_cap():
    waits = [retry_wait(n, 0.0, 100.0) for n in range(1, 10)]
    assert waits[:3] == [FIRST_WAIT_S, 2 * FIRST_WAIT_S, 4 * FIRST_WAIT_S]
    assert max(waits) == MAX_WAIT_S and waits[-1] == MAX_WAIT_S
    assert retry_wait(10_000, 0.0, 100.0) == MAX_WAIT_S  # no overflow however long an outage lasts


def test_it_gives_up_at_the_budget_and_never_waits_past_it():
    assert retry_wait(1, 20.0, 20.0) is None
    assert retry_wait(3, 25.0, 20.0) is None
    assert retry_wait(8, 19.5, 20.0) == pytest.approx(0.5)  # the last try starts at the budget, not after
    assert retry_wait(0, 0.0, 20.0) is None  # nothing failed: nothing to wait for


@given(st.floats(0.1, 60.0), st.lists(st.floats(0.0, 3.0), max_size=200))
def test_every_try_starts_within_the_budget(budget, try_times):
    """Simulated: each try takes some time, then the policy's wait; the next try never starts after the budget."""
    elapsed, attempt = 0.0, 0
    for took in try_times:
        elapsed += took
        attempt += 1
        wait = retry_wait(attempt, elapsed, budget)
        if wait is None:
            assert elapsed >= budget
            return
        assert 0 <= wait <= MAX_WAIT_S
        elapsed += wait
        assert elapsed <= budget + 1e-9


def test_what_an_election_looks_like_is_transient_and_nothing_else():
    assert transient(NoStreamResponseError())  # a publish with no stream leader to answer
    assert transient(nats.errors.NoRespondersError())
    assert transient(ServiceUnavailableError(code=503, err_code=10008, description="JetStream system temporarily"))
    assert transient(APIError(code=500, err_code=10009, description="JetStream cluster can not handle request"))
    assert transient(nats.errors.TimeoutError()) and transient(TimeoutError())
    # a timeout may have landed: sent again only with a message id
    assert not transient(nats.errors.TimeoutError(), idempotent=False)
    assert not transient(ServiceUnavailableError())  # no responders to JetStream's API: no JetStream at all
    assert not transient(APIError(code=503, err_code=10039, description="jetstream not enabled for account"))
    assert not transient(BadRequestError(code=400, err_code=10058, description="stream name already in use"))
    assert not transient(APIError(code=400, err_code=10005, description="insufficient resources"))
    assert not transient(ValueError("a bug"))


async def test_riding_out_tries_again_then_returns_what_the_op_returns():
    failures = [NoStreamResponseError(), nats.errors.TimeoutError()]
    tries = 0

    async def op():
        nonlocal tries
        tries += 1
        if failures:
            raise failures.pop(0)
        return 42

    assert await riding_out(op, "test", budget_s=5.0) == 42 and tries == 3


async def test_riding_out_gives_up_with_the_last_error_and_at_once_on_any_other():
    async def down():
        raise NoStreamResponseError()

    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises(NoStreamResponseError):
        await riding_out(down, "test", budget_s=0.5)
    assert 0.4 <= loop.time() - start < 2.0

    tries = 0

    async def refused():
        nonlocal tries
        tries += 1
        raise BadRequestError(code=400, err_code=10058, description="no")

    with pytest.raises(BadRequestError):
        await riding_out(refused, "test", budget_s=5.0)
    assert tries == 1

    tries = 0

    async def once():
        nonlocal tries
        tries += 1
        raise NoStreamResponseError()

    with pytest.raises(NoStreamResponseError):  # no budget (one server): one try, as before
        await riding_out(once, "test", budget_s=0.0)
    assert tries == 1


def test_nats_url_lists_a_clusters_servers_and_redacts_each():
    url = "nats://a:1, nats://u:pw@b:2,nats://c:3"
    assert nats_servers(url) == ["nats://a:1", "nats://u:pw@b:2", "nats://c:3"]
    assert redact_url(url) == "nats://a:1,nats://***@b:2,nats://c:3"
    with pytest.raises(ValueError, match="NATS_URL=' , ': names no server"):
        Settings(nats_url=" , ")


def test_replicas_and_the_retry_budget_reach_a_service_through_its_environment():
    settings = Settings(nats_replicas=3, nats_retry_s=7.5)
    assert env_bus_options(settings.env()) == (3, 7.5)
    assert env_bus_options({}) == (None, None)  # unset: Bus.connect retries on a cluster only
    assert env_bus_options({"YANTRA_NATS_REPLICAS": "x", "YANTRA_NATS_RETRY_S": "-1"}) == (None, None)
    assert "YANTRA_NATS_RETRY_S" not in Settings().env()
