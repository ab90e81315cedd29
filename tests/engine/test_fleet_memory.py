"""What a fleet remembers together (issue 26, PRODUCT.md "Fleet"): a domain's catch-all answer
and a host's greylisting go through the ``shared_limits`` store (``engine/host_memory.py``), so
a second engine sends no catch-all probe another already answered and no greylisting retry
another already saw fail; the verdicts are those of engines alone. Real sockets to the sandbox,
the machine's real Redis and PostgreSQL; counted as the hosts saw it."""

import itertools
from collections.abc import Callable

import pytest

from listhygiene.engine import Engine
from listhygiene.engine.host_state import open_host_state
from listhygiene.sandbox import Sandbox
from listhygiene.statuses import Status
from tests.conftest import empty_redis

PEOPLE = ["ann", "bob", "cat", "dan"]
#: Greylisting domains: the host remembers every triplet it saw, so each run takes fresh ones.
GREY = [f"grey{i}.test" for i in range(16)]
_fresh = itertools.count()

WORLD = {
    "domains": {
        "catchall.test": {
            "mx": [{"preference": 10, "host": "mx.open.test"}],
            "mailboxes": PEOPLE,
            "catch_all": True,
        },
        "plain.test": {"mx": [{"preference": 10, "host": "mx.open.test"}], "mailboxes": PEOPLE},
        **{
            name: {"mx": [{"preference": 10, "host": "mx.grey.test"}], "mailboxes": PEOPLE}
            for name in GREY
        },
    },
    "hosts": {
        "mx.open.test": {},
        # a new (client, sender, recipient) gets 450 "Greylisted, try again later" (no delay
        # named) until 1.5 s have passed since the host first saw it
        "mx.grey.test": {"greylist_delay_ms": 1500},
    },
}

#: The world of this module's ``sandbox`` (tests/conftest.py).
SANDBOX_WORLD = WORLD

#: Retries at 0.5 s and 2.5 s after the first refusal: the first too early for the host's 1.5 s.
RETRIES = "0.5,2"

Verdict = tuple[str, str, str | None, bool]


def empty_store(kind: str, new_pg_database: Callable[[], str]) -> str:
    """An empty store: a fresh PostgreSQL database, or a Redis database of this module's own
    (not test_fleet_limits' 13: with ``make test``'s two workers both modules may run at once,
    and the sandboxes' host addresses are the same), emptied."""
    if kind == "postgresql":
        return new_pg_database()
    return empty_redis(14)


@pytest.fixture(params=["redis", "postgresql"])
def store(request: pytest.FixtureRequest, new_pg_database: Callable[[], str]) -> str:
    return empty_store(request.param, new_pg_database)


@pytest.fixture(params=["redis", "postgresql", "alone"])
def store_or_none(request: pytest.FixtureRequest, new_pg_database: Callable[[], str]) -> str | None:
    """A store of each kind, and none: the engines alone."""
    return None if request.param == "alone" else empty_store(request.param, new_pg_database)


async def verify(
    sandbox: Sandbox, addresses: list[str], store: str | None, **settings: object
) -> list[Verdict]:
    """One engine, alone or sharing ``store``, from start to close: the verdicts, sorted."""
    engine = Engine(sandbox.engine_settings(helo="verifier.test", shared_limits=store, **settings))
    try:
        results = [r async for r in engine.verify_many(addresses)]
    finally:
        await engine.aclose()
    return sorted(
        (r.email, r.status.value, r.reason.value if r.reason else None, r.is_catchall)
        for r in results
    )


def probes(sandbox: Sandbox, host: str, domain: str) -> int:
    """Catch-all probes (RCPT of a random ``lh-`` local part) the host got for ``domain``."""
    return sum(
        1
        for r in sandbox.stats(host).recipients
        if r.lower().endswith("@" + domain) and r.lower().startswith("lh-")
    )


# -- the catch-all answer --------------------------------------------------------------------


async def two_engines_on_one_domain(sandbox: Sandbox, store: str | None) -> list[Verdict]:
    """Two engines one after the other, each with addresses of its own of a catch-all domain
    and of a domain that is not one."""
    first = [f"{p}@{d}" for p in ("ann", "bob", "nobody") for d in ("catchall.test", "plain.test")]
    second = [f"{p}@{d}" for p in ("cat", "dan", "noone") for d in ("catchall.test", "plain.test")]
    return await verify(sandbox, first, store) + await verify(sandbox, second, store)


async def test_a_domains_catch_all_answer_is_probed_once_for_the_fleet(
    sandbox: Sandbox, store: str
) -> None:
    sandbox.stats("mx.open.test").reset()
    alone = await two_engines_on_one_domain(sandbox, None)
    assert probes(sandbox, "mx.open.test", "catchall.test") == 2  # each engine asks
    assert probes(sandbox, "mx.open.test", "plain.test") == 2

    sandbox.stats("mx.open.test").reset()
    shared = await two_engines_on_one_domain(sandbox, store)
    # the first engine's answers (accepts anything; refuses an unknown local part) served
    # the second: one probe for each domain in all
    assert probes(sandbox, "mx.open.test", "catchall.test") == 1
    assert probes(sandbox, "mx.open.test", "plain.test") == 1
    assert shared == alone
    statuses = {email: status for email, status, _, _ in shared}
    assert statuses["cat@catchall.test"] == Status.CATCHALL.value
    assert statuses["noone@catchall.test"] == Status.CATCHALL.value
    assert statuses["cat@plain.test"] == Status.VALID.value
    assert statuses["noone@plain.test"] == Status.INVALID.value

    state = open_host_state(store)
    try:
        facts = await state.facts("domain:catchall.test")
    finally:
        await state.close()
    assert facts["catch_all"] is True
    assert facts["catch_all_host"] == sandbox.address_of("mx.open.test")


async def test_a_probe_without_an_answer_is_not_shared(sandbox: Sandbox, store: str) -> None:
    """A greylisted probe, with no retry in the run, says nothing of the domain: nothing goes to
    the store, and the next engine probes for itself."""
    domain = GREY[next(_fresh)]
    stats = sandbox.stats("mx.grey.test")
    stats.reset()
    for people in (PEOPLE[:2], PEOPLE[2:]):
        verdicts = await verify(sandbox, [f"{p}@{domain}" for p in people], store, retry_delays="")
        assert {status for _, status, _, _ in verdicts} == {Status.UNKNOWN.value}
    state = open_host_state(store)
    try:
        assert await state.facts(f"domain:{domain}") == {}
    finally:
        await state.close()
    assert probes(sandbox, "mx.grey.test", domain) == 2


async def test_a_lost_store_costs_the_catch_all_probe_nothing(sandbox: Sandbox) -> None:
    """Nothing listens at the store: each engine probes for itself and gives every verdict."""
    sandbox.stats("mx.open.test").reset()
    alone = await two_engines_on_one_domain(sandbox, None)
    lost = await two_engines_on_one_domain(sandbox, "redis://127.0.0.1:1/0")
    assert lost == alone
    assert probes(sandbox, "mx.open.test", "catchall.test") == 4


# -- greylisting -----------------------------------------------------------------------------


def early_retries(sandbox: Sandbox, domain: str) -> int:
    """RCPT of ``domain`` beyond each recipient's first (refused: a new triplet) and last (the
    answer): the retries the greylisting host refused for coming too early."""
    sent = [r.lower() for r in sandbox.stats("mx.grey.test").recipients]
    sent = [r for r in sent if r.endswith("@" + domain)]
    return len(sent) - 2 * len(set(sent))


async def test_a_hosts_greylisting_delay_is_learnt_once_for_the_fleet(
    sandbox: Sandbox, store_or_none: str | None
) -> None:
    """The first engine's retry at 0.5 s is refused, its retry at 2.5 s passes; a second engine
    sharing the store retries straight at that wait (no early retry), one alone at 0.5 s again.
    Each engine has a domain of its own on the host: its triplets are new to the host."""
    first, second = GREY[next(_fresh)], GREY[next(_fresh)]
    people = ["ann", "bob", "nobody"]
    url = store_or_none
    shared = url is not None
    sandbox.stats("mx.grey.test").reset()
    verdicts = [
        await verify(sandbox, [f"{p}@{domain}" for p in people], url, retry_delays=RETRIES)
        for domain in (first, second)
    ]
    assert early_retries(sandbox, first) == 4  # the probe and three addresses, once each
    assert early_retries(sandbox, second) == (0 if shared else 4)
    for domain, got in zip((first, second), verdicts, strict=True):
        assert got == [
            (f"ann@{domain}", Status.VALID.value, None, False),
            (f"bob@{domain}", Status.VALID.value, None, False),
            (f"nobody@{domain}", Status.INVALID.value, "mailbox_not_found", False),
        ]
    if url is not None:
        state = open_host_state(url)
        try:
            facts = await state.facts(f"host:{sandbox.address_of('mx.grey.test')}")
        finally:
            await state.close()
        assert facts["greylist_refused"] < 1.5 <= facts["greylist_passed"]
