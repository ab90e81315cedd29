"""Two engines, one politeness budget (issue 26, PRODUCT.md "Fleet"): engines given the same
``shared_limits`` store hold no more sessions to a mail host than one engine would, as the host
counts them; without a store each holds its own. Real sockets to the sandbox, the machine's real
Redis and PostgreSQL."""

import asyncio
from collections.abc import Callable, Sequence

import pytest

from listhygiene.engine import Engine, EngineSettings
from listhygiene.engine.host_state import (
    MEMBERS_KEY,
    Budget,
    HostStateError,
    Lease,
    LocalHostState,
)
from listhygiene.engine.pacing import Pacer
from listhygiene.sandbox import Sandbox
from listhygiene.statuses import Status
from tests.conftest import empty_redis

PEOPLE = ["ann", "bob", "cat"]
DOMAINS = [f"tenant{i}.test" for i in range(8)]

DEAD = [f"dead{i}" for i in range(10)]
WORLD = {
    "domains": {
        **{
            name: {"mx": [{"preference": 10, "host": "mx.shared.test"}], "mailboxes": PEOPLE}
            for name in DOMAINS
        },
        # a host stricter than Postfix's defaults: ends a session at its 5th error
        **{
            f"strict{i}.test": {
                "mx": [{"preference": 10, "host": "mx.strict.test"}],
                "mailboxes": PEOPLE,
            }
            for i in range(4)
        },
    },
    "hosts": {
        # each session lasts a few round trips of 150 ms: the two engines' sessions overlap
        "mx.shared.test": {"latency_ms": 150},
        "mx.strict.test": {"soft_error_limit": 3, "hard_error_limit": 5, "error_sleep_ms": 200},
    },
}

#: The world of this module's ``sandbox`` (tests/conftest.py).
SANDBOX_WORLD = WORLD


async def both(sandbox: Sandbox, shared_limits: str | None) -> list[Engine]:
    """Two engines, each with half the domains, verifying at once."""
    engines = [
        Engine(sandbox.engine_settings(helo="verifier.test", shared_limits=shared_limits))
        for _ in range(2)
    ]
    halves = [DOMAINS[:4], DOMAINS[4:]]

    async def run(engine: Engine, domains: list[str]) -> None:
        try:
            addresses = [f"{p}@{d}" for d in domains for p in PEOPLE]
            results = [r async for r in engine.verify_many(addresses)]
            assert {r.status for r in results} == {Status.VALID}
        finally:
            await engine.aclose()

    await asyncio.gather(*(run(e, h) for e, h in zip(engines, halves, strict=True)))
    return engines


@pytest.fixture(params=["redis", "postgresql"])
def store(request: pytest.FixtureRequest, new_pg_database: Callable[[], str]) -> str:
    """An empty store: a fresh PostgreSQL database, or a Redis database of this module's own,
    emptied (the sandbox's host addresses are the same in every run, and what a run learnt of
    them lives an hour)."""
    if request.param == "postgresql":
        return new_pg_database()
    return empty_redis(13)


async def test_two_engines_share_one_budget_per_host(sandbox: Sandbox, store: str) -> None:
    stats = sandbox.stats("mx.shared.test")
    stats.reset()
    engines = await both(sandbox, store)
    assert stats.max_held <= engines[0].settings.host_concurrency == 2
    assert sum(e.politeness["sessions"] for e in engines) >= len(DOMAINS)


async def test_without_a_store_each_engine_holds_its_own(sandbox: Sandbox) -> None:
    """What the shared budget prevents: two engines alone hold twice the sessions."""
    stats = sandbox.stats("mx.shared.test")
    stats.reset()
    await both(sandbox, None)
    assert stats.max_held > 2


@pytest.mark.parametrize("shared", [True, False])
async def test_what_one_engine_learnt_of_a_host_the_next_knows(
    sandbox: Sandbox, store: str, shared: bool
) -> None:
    """An engine meets a strict host's error limit once (421 too many errors) and learns it; a
    second engine given the same store starts from what was learnt and meets it never, where
    an engine alone meets it again."""
    stats = sandbox.stats("mx.strict.test")
    stats.reset()
    for i in (0, 1) if shared else (2, 3):
        engine = Engine(
            sandbox.engine_settings(helo="verifier.test", shared_limits=store if shared else None)
        )
        addresses = [f"{local}@strict{i}.test" for local in (*DEAD, *PEOPLE)]
        results = [r async for r in engine.verify_many(addresses)]
        await engine.aclose()
        assert {r.email.split("@")[0] for r in results if r.status is Status.VALID} == set(PEOPLE)
    met = [kind for _, kind, _ in stats.events if kind == "too_many_errors"]
    assert len(met) == (1 if shared else 2)


async def test_a_lost_store_is_said_once_and_the_engine_goes_on_alone(
    sandbox: Sandbox, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing listens at the store: the run still gives every verdict, with one session at a
    time to the host, and says once why."""
    stats = sandbox.stats("mx.shared.test")
    stats.reset()
    engine = Engine(
        sandbox.engine_settings(helo="verifier.test", shared_limits="redis://127.0.0.1:1/0")
    )
    addresses = [f"{p}@{d}" for d in DOMAINS for p in PEOPLE]
    results = [r async for r in engine.verify_many(addresses)]
    await engine.aclose()
    assert {r.status for r in results} == {Status.VALID}
    said = [r for r in caplog.records if "without the fleet's budget" in r.getMessage()]
    assert len(said) == 1
    assert "redis://127.0.0.1:1/0" in said[0].getMessage()
    assert stats.max_held == 1


def test_a_bad_store_url_is_a_settings_error(sandbox: Sandbox) -> None:
    with pytest.raises(ValueError, match="--shared-limits 'memcached://x'"):
        sandbox.engine_settings(shared_limits="memcached://x")


def test_the_cli_refuses_a_bad_store_in_one_line() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [
            *[sys.executable, "-m", "listhygiene.cli", "verify"],
            "--shared-limits",
            "memcached://x",
            "a@b.test",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "--shared-limits 'memcached://x'" in done.stderr
    assert "Traceback" not in done.stderr


class _LostAfterCounting(LocalHostState):
    """A store that counted three processes, then is lost at the first session's slot."""

    async def holders(self, key: str) -> int:
        return 3

    async def _try(self, budgets: Sequence[Budget], lease: Lease) -> float:
        if any(budget.key != MEMBERS_KEY for budget in budgets):
            raise HostStateError("shared limits at test://store: connection lost")
        return await super()._try(budgets, lease)


async def test_a_lost_store_leaves_a_process_its_share_of_the_fleets_budget(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Three processes were counted: the one that loses the store holds a third of each
    budget (6 sessions at once to a host: 2; 9 new a second: 3), not the whole."""
    settings = EngineSettings(host_concurrency=6, host_rate=9.0, concurrency=20)
    pacer = Pacer(settings, _LostAfterCounting())
    release = asyncio.Event()
    entered = 0

    async def session() -> None:
        nonlocal entered
        async with pacer.session("192.0.2.1"):
            entered += 1
            await release.wait()

    tasks = [asyncio.create_task(session()) for _ in range(6)]
    for _ in range(100):
        await asyncio.sleep(0.01)
    assert entered == 2  # of six wanting a session at once
    assert pacer._limits()["host"] == (2, 3.0)
    release.set()
    await asyncio.gather(*tasks)
    said = [
        r.getMessage() for r in caplog.records if "without the fleet's budget" in r.getMessage()
    ]
    assert len(said) == 1
    assert "one of the 3 processes last counted" in said[0]
