"""The shared host state (issue 26, PRODUCT.md "Fleet"): session slots and facts that every
process given the same store shares, on the real Redis and PostgreSQL of this machine (and the
in-process default). Behaviour is asserted (who gets a slot, what comes back), not time."""

import asyncio
import os
import secrets
from collections.abc import AsyncIterator, Callable

import pytest

from listhygiene.engine.host_state import (
    Budget,
    HostState,
    HostStateError,
    Lease,
    LocalHostState,
    PostgresHostState,
    RedisHostState,
    open_host_state,
)
from listhygiene.errors import ConfigurationError, StorageError
from tests.conftest import empty_redis

KINDS = ["local", "redis", "postgresql"]
REDIS_URL = os.environ.get("LISTHYGIENE_TEST_REDIS", "redis://127.0.0.1:6379")


def key() -> str:
    """A key of this test alone (the Redis database is shared with other tests)."""
    return f"test:{secrets.token_hex(6)}"


@pytest.fixture(params=KINDS)
async def states(
    request: pytest.FixtureRequest, new_pg_database: Callable[[], str]
) -> AsyncIterator[tuple[HostState, HostState]]:
    """Two host states of one kind sharing one store: two processes of a fleet."""
    kind = request.param
    if kind == "local":
        local = LocalHostState()
        pair: tuple[HostState, HostState] = (local, local)
    elif kind == "redis":
        pair = (RedisHostState(f"{REDIS_URL}/0"), RedisHostState(f"{REDIS_URL}/0"))
    else:
        url = new_pg_database()
        pair = (PostgresHostState(url), PostgresHostState(url))
    yield pair
    for state in {id(s): s for s in pair}.values():
        await state.close()


async def test_sessions_at_once_are_shared(states: tuple[HostState, HostState]) -> None:
    one, two = states
    host = Budget(key(), concurrency=2, per_second=100)
    first = await one.acquire([host])
    await two.acquire([host])
    third = asyncio.ensure_future(two.acquire([host]))
    await asyncio.sleep(0.2)
    assert not third.done()  # two held by the fleet: the third waits
    await one.release(first)
    lease = await asyncio.wait_for(third, 5)
    assert lease.keys == (host.key,)


async def test_new_sessions_a_second_are_shared(states: tuple[HostState, HostState]) -> None:
    """A burst of ``concurrency`` starts, then ``per_second``: the token bucket of a process
    (engine/pacing.py), over the fleet."""
    one, two = states
    host = Budget(key(), concurrency=2, per_second=2)
    lease = await one.acquire([host])
    await one.release(lease)
    lease = await two.acquire([host])
    await two.release(lease)
    wait = await one._try([host], lease)  # a third start at once: half a second to wait
    assert 0.3 < wait <= 0.5
    assert await asyncio.wait_for(two.acquire([host]), 5)  # granted once the rate allows


async def test_several_budgets_are_taken_all_or_none(states: tuple[HostState, HostState]) -> None:
    one, two = states
    host = Budget(key(), concurrency=1, per_second=100)
    provider = Budget(key(), concurrency=2, per_second=100)
    held = await one.acquire([host])
    refused = asyncio.ensure_future(two.acquire([host, provider]))
    await asyncio.sleep(0.2)
    assert not refused.done()
    # the refused request holds none of the provider's slots: both are still free
    await two.acquire([provider])
    await one.acquire([provider])
    await one.release(held)
    refused.cancel()


async def test_a_dead_processes_slots_come_back_when_its_lease_expires(
    states: tuple[HostState, HostState],
) -> None:
    one, two = states
    one.lease_seconds = 0.5
    host = Budget(key(), concurrency=1, per_second=100)

    # a process that took the slot and died: nobody renews or releases its lease
    assert await one._try([host], Lease("dead", (host.key,))) == 0
    waiting = asyncio.ensure_future(two.acquire([host]))
    await asyncio.sleep(0.2)
    assert not waiting.done()
    assert await asyncio.wait_for(waiting, 5)


async def test_a_held_lease_is_renewed(states: tuple[HostState, HostState]) -> None:
    one, two = states
    one.lease_seconds = 0.4
    host = Budget(key(), concurrency=1, per_second=100)
    lease = await one.acquire([host])  # renewed in the background while held
    waiting = asyncio.ensure_future(two.acquire([host]))
    await asyncio.sleep(1.0)  # more than twice the lease's life
    assert not waiting.done()
    await one.release(lease)
    assert await asyncio.wait_for(waiting, 5)


async def test_facts_are_shared_and_expire(states: tuple[HostState, HostState]) -> None:
    one, two = states
    host = key()
    await one.learn(host, "rcpt_cap", 5, ttl=60)
    await one.learn(host, "ban_until", {"seconds": 30}, ttl=0.3)
    assert await two.facts(host) == {"rcpt_cap": 5, "ban_until": {"seconds": 30}}
    await asyncio.sleep(0.5)
    assert await two.facts(host) == {"rcpt_cap": 5}
    assert await two.facts(key()) == {}


async def test_an_unreachable_store_is_one_error_naming_it() -> None:
    state = open_host_state("redis://127.0.0.1:1/0")
    with pytest.raises(HostStateError, match=r"shared limits at redis://127\.0\.0\.1:1/0") as err:
        await state.acquire([Budget(key(), 1, 1)])
    assert isinstance(err.value, StorageError)
    await state.close()
    state = open_host_state("postgresql://nobody@127.0.0.1:1/none")
    with pytest.raises(HostStateError, match="shared limits at postgresql://"):
        await state.facts(key())
    await state.close()


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        (None, LocalHostState),
        ("none", LocalHostState),
        ("redis://127.0.0.1:6379/0", RedisHostState),
        ("postgresql://postgres@127.0.0.1/test", PostgresHostState),
        ("postgresql+psycopg://postgres@127.0.0.1/test", PostgresHostState),
    ],
)
def test_the_store_comes_from_the_url(url: str | None, kind: type) -> None:
    assert isinstance(open_host_state(url), kind)


def test_an_unknown_url_is_a_settings_error() -> None:
    with pytest.raises(ConfigurationError, match="--shared-limits 'mysql://x'"):
        open_host_state("mysql://x")


@pytest.mark.parametrize("kind", ["redis", "postgresql"])
async def test_the_store_counts_the_processes_that_share_it(
    kind: str, new_pg_database: Callable[[], str]
) -> None:
    """What the fallback's share comes from (engine/pacing.py): each process joins, and is
    counted until it closes (or dies: its lease expires)."""
    if kind == "redis":
        url = empty_redis(6)  # a database of this test's own: it counts every member
        one: HostState = RedisHostState(url)
        two: HostState = RedisHostState(url)
    else:
        url = new_pg_database()
        one, two = PostgresHostState(url), PostgresHostState(url)
    assert await one.members() == 0
    assert await one.join() == 1
    assert await two.join() == 2
    assert await one.join() == 2  # joined once
    await two.close()
    assert await one.members() == 1
    await one.close()
    three = RedisHostState(url) if kind == "redis" else PostgresHostState(url)
    assert await three.members() == 0
    await three.close()
