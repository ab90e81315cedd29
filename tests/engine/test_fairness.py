"""The order in which the engine's shared slots are handed out (engine/fairness.py): interactive
work before bulk work, bulk tenants in turn, a share kept for interactive work, cancellations
that never lose a slot; and a bulk run that reads its input in portions."""

import asyncio
from collections.abc import Iterator

import pytest

from listhygiene.engine import Engine
from listhygiene.engine.fairness import (
    FairSlots,
    InteractiveActivity,
    Lane,
    Priority,
    current_lane,
)
from listhygiene.sandbox import Sandbox
from tests.conftest import engine_defaults, sandbox_settings

INTERACTIVE = Priority.INTERACTIVE
BULK = Priority.BULK


async def _order_of_service(slots: FairSlots, lanes: list[Lane]) -> list[Lane]:
    """Queue one acquirer per lane (in this order) behind a held slot; the order they got in."""
    served: list[Lane] = []
    holder = Lane(BULK, "holder")
    await slots.acquire(holder)
    while slots.free:  # every slot busy, so the others queue
        await slots.acquire(holder)

    async def one(lane: Lane) -> None:
        await slots.acquire(lane)
        served.append(lane)
        await asyncio.sleep(0)
        slots.release(lane)

    tasks = []
    for lane in lanes:
        tasks.append(asyncio.ensure_future(one(lane)))
        await asyncio.sleep(0)  # queued in this order
    assert slots.waiting() == len(lanes)
    for _ in range(slots.slots):
        slots.release(holder)
    await asyncio.gather(*tasks)
    return served


async def test_interactive_before_bulk_and_bulk_tenants_in_turn() -> None:
    lanes = (
        [Lane(BULK, "a")] * 4
        + [Lane(BULK, "b")] * 2
        + [Lane(INTERACTIVE, "c"), Lane(BULK, "d"), Lane(INTERACTIVE, "e")]
    )
    served = await _order_of_service(FairSlots(1), lanes)
    assert served == [
        Lane(INTERACTIVE, "c"),
        Lane(INTERACTIVE, "e"),
        Lane(BULK, "a"),
        Lane(BULK, "b"),
        Lane(BULK, "d"),
        Lane(BULK, "a"),
        Lane(BULK, "b"),
        Lane(BULK, "a"),
        Lane(BULK, "a"),
    ]


async def test_interactive_tenants_take_turns_too() -> None:
    lanes = [Lane(INTERACTIVE, "a")] * 3 + [Lane(INTERACTIVE, "b")]
    served = await _order_of_service(FairSlots(1), lanes)
    assert [lane.tenant for lane in served] == ["a", "b", "a", "a"]


async def test_bulk_work_leaves_the_reserved_slots_to_interactive_work() -> None:
    slots = FairSlots(4, bulk_limit=3)
    bulk = Lane(BULK, "a")
    for _ in range(3):
        await slots.acquire(bulk)
    waiting = asyncio.ensure_future(slots.acquire(bulk))
    await asyncio.sleep(0)
    assert not waiting.done()
    assert slots.free == 1
    await asyncio.wait_for(slots.acquire(Lane(INTERACTIVE, "b")), 1)  # no wait
    assert slots.free == 0
    slots.release(bulk)
    await asyncio.wait_for(waiting, 1)


async def test_a_cancelled_waiter_loses_no_slot() -> None:
    slots = FairSlots(1)
    lane = Lane(BULK, "a")
    await slots.acquire(lane)
    cancelled = asyncio.ensure_future(slots.acquire(Lane(INTERACTIVE, "b")))
    later = asyncio.ensure_future(slots.acquire(lane))
    await asyncio.sleep(0)
    cancelled.cancel()
    slots.release(lane)  # granted to the cancelled one, or skipping it: either way ``later`` runs
    await asyncio.wait_for(later, 1)
    assert cancelled.cancelled()
    slots.release(lane)
    assert slots.free == 1
    assert slots.waiting() == 0


async def test_a_waiter_granted_as_it_is_cancelled_passes_the_slot_on() -> None:
    slots = FairSlots(1)
    lane = Lane(INTERACTIVE, "a")
    await slots.acquire(lane)
    granted = asyncio.ensure_future(slots.acquire(lane))
    after = asyncio.ensure_future(slots.acquire(lane))
    await asyncio.sleep(0)
    slots.release(lane)  # ``granted`` gets the slot ...
    granted.cancel()  # ... and is cancelled before it runs
    await asyncio.wait_for(after, 1)
    assert granted.cancelled()
    slots.release(lane)
    assert slots.free == 1


# -- the engine's runs -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def many_domains() -> Iterator[Sandbox]:
    world = {
        "domains": {f"d{i}.test": {"a": ["mail.test"], "mailboxes": ["alice"]} for i in range(60)},
        "hosts": {"mail.test": {}},
    }
    with Sandbox(world) as sandbox:
        yield sandbox


def _engine(sandbox: Sandbox, **changes: object) -> Engine:
    """The engine's own time limits and retries, not the suite's short ones: what these tests
    have always run with."""
    options = engine_defaults("dns_timeout", "smtp_timeout", "retry_delays") | {"check_smtp": False}
    return Engine(sandbox_settings(sandbox, **(options | changes)))


async def test_a_bulk_run_reads_its_input_in_portions(many_domains: Sandbox) -> None:
    engine = _engine(many_domains, bulk_pending=5)
    read = 0
    most_ahead = 0
    seen = 0

    def addresses() -> Iterator[str]:
        nonlocal read, most_ahead
        for i in range(60):
            read += 1
            most_ahead = max(most_ahead, read - seen)
            yield f"alice@d{i}.test"

    async for _ in engine.verify_each(addresses(), priority="bulk", tenant="a"):
        seen += 1
    assert seen == 60
    assert most_ahead <= 6  # at most bulk_pending (and the one being read) ahead
    # an interactive run keeps the whole read-ahead
    read = seen = most_ahead = 0
    async for _ in _engine(many_domains, bulk_pending=5).verify_each(addresses()):
        seen += 1
    assert most_ahead > 6


async def test_a_run_carries_its_lane_to_its_lookups(many_domains: Sandbox) -> None:
    engine = _engine(many_domains)
    seen: list[Lane] = []
    engine._ensure_started()
    resolver = engine._resolver
    assert resolver is not None
    original = resolver._lookup

    async def spying(domain: str) -> object:
        seen.append(current_lane())
        return await original(domain)

    resolver._lookup = spying  # type: ignore[method-assign]
    async for _ in engine.verify_each(["alice@d1.test"], priority="bulk", tenant="key-a"):
        pass
    await engine.domain_facts(["d2.test"], priority="bulk", tenant="key-b")
    await engine.verify("alice@d3.test")
    assert seen == [Lane(BULK, "key-a"), Lane(BULK, "key-b"), Lane(INTERACTIVE, "")]
    assert current_lane() == Lane()  # the caller's own context is untouched


@pytest.fixture(scope="module")
def one_busy_host() -> Iterator[Sandbox]:
    domains = {f"bulk{i}.test": {"a": ["mail.test"], "mailboxes": ["alice"]} for i in range(30)}
    domains["solo.test"] = {"a": ["mail.test"], "mailboxes": ["alice"]}
    world = {"domains": domains, "hosts": {"mail.test": {"latency_ms": 20}}}
    with Sandbox(world) as sandbox:
        yield sandbox


async def test_an_interactive_session_goes_before_queued_bulk_sessions(
    one_busy_host: Sandbox,
) -> None:
    """One session at a time to the host: a bulk run's 30 domains queue for it; an interactive
    verification asked meanwhile takes the host's next session (politeness unchanged)."""
    engine = _engine(one_busy_host, check_smtp=True, host_concurrency=1, host_rate=1000)
    stats = one_busy_host.stats("mail.test")
    stats.reset()

    async def bulk() -> int:
        count = 0
        emails = [f"alice@bulk{i}.test" for i in range(30)]
        async for _ in engine.verify_each(emails, priority="bulk", tenant="a"):
            count += 1
        return count

    job = asyncio.ensure_future(bulk())
    while stats.connections == 0:  # noqa: ASYNC110 - counted in the sandbox's own thread
        await asyncio.sleep(0.01)
    result = await engine.verify("alice@solo.test")
    assert result.status == "valid"
    assert await job == 30
    assert stats.max_active == 1
    # each session carries a domain's catch-all probe and its address: the interactive address
    # is in the second session or so, not the 31st
    position = stats.recipients.index("alice@solo.test")
    assert position < 3 * 2, stats.recipients[: position + 1]


@pytest.fixture(scope="module")
def five_domains() -> Iterator[Sandbox]:
    mailboxes = [f"a{n}" for n in range(10)]
    domains = {f"s{i}.test": {"a": ["mail.test"], "mailboxes": mailboxes} for i in range(5)}
    with Sandbox({"domains": domains, "hosts": {"mail.test": {}}}) as sandbox:
        yield sandbox


async def test_a_bulk_run_in_portions_still_gives_each_domain_one_session(
    five_domains: Sandbox,
) -> None:
    """A bulk list is read a domain at a time: in portions of 5, a list that interleaves 5
    domains of 10 addresses each would otherwise open a session per address (50, as an
    interactive run with the same read-ahead does); together, a domain's 10 take 2 at most."""
    engine = _engine(five_domains, check_smtp=True, bulk_pending=5, host_rate=1000)
    stats = five_domains.stats("mail.test")
    stats.reset()
    emails = [f"a{n}@s{i}.test" for n in range(10) for i in range(5)]
    statuses = [r.status async for _, r in engine.verify_each(emails, priority="bulk")]
    assert statuses == ["valid"] * 50
    assert stats.connections <= 10


async def test_bulk_work_holds_back_while_an_interactive_run_is_in_progress() -> None:
    activity = InteractiveActivity(max_hold=10)
    order: list[str] = []

    async def bulk() -> None:
        await activity.bulk_turn()
        order.append("bulk")

    with activity.running():
        waiting = asyncio.ensure_future(bulk())
        for _ in range(5):
            await asyncio.sleep(0)
        order.append("interactive")
    await asyncio.wait_for(waiting, 1)
    assert order == ["interactive", "bulk"]


async def test_a_steady_stream_of_interactive_runs_does_not_stop_bulk_work() -> None:
    activity = InteractiveActivity(max_hold=0.2)
    with activity.running():
        await asyncio.wait_for(activity.bulk_turn(), 5)  # held, then let through
        # and then let through at once for a while: one hold does not become one per step
        passed = 0
        while True:
            turn = asyncio.ensure_future(activity.bulk_turn())
            await asyncio.sleep(0)
            if not turn.done():
                turn.cancel()
                break
            passed += 1
            if passed == 100:
                break
    assert passed >= 1
