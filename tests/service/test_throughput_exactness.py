"""Credits and rate limits stay exact when their writes are coalesced (store/batching.py).

A loaded server admits, reserves and refunds the requests that arrive together in one
transaction. These tests send many requests at once, to two ``listhygiene serve`` processes on
one PostgreSQL database and to one store from many coroutines, and check that a key with N
credits gets exactly N charged verifications, that a limit of L requests per window admits
exactly L, and that the batched store calls answer as the same calls made one after the other
(docs/service.md, "Speed").
"""

import asyncio
from collections import Counter
from collections.abc import Callable, Iterator

import httpx
import pytest

from listhygiene.sandbox import Sandbox
from listhygiene.service.store import Store, form_b_limits
from listhygiene.service.store.batching import StoreBatches
from tests.service.live import Server

#: Mailboxes of the sample world on domains with working DNS: without SMTP each is ``valid``
#: (charged, never unknown and refunded).
MAILBOXES = [
    f"{person}@northwind.test"
    for person in ("james.wilson", "mary.johnson", "robert.brown", "patricia.garcia")
]


@pytest.fixture
def two_servers(
    sandbox: Sandbox, new_pg_database: Callable[[], str]
) -> Iterator[tuple[str, list[str]]]:
    """(database URL, base URLs of two ``listhygiene serve`` processes on it)."""
    url = new_pg_database()
    Store(url).close()
    servers = [Server(url, sandbox, args=()) for _ in range(2)]
    try:
        yield url, [server.root for server in servers]
    finally:
        for server in servers:
            server.stop()


async def _verify_many(
    bases: list[str], key: str, count: int
) -> list[tuple[int, dict[str, str], dict[str, object]]]:
    """``count`` form B ``/verify`` requests at once, alternating between the servers:
    (status code, headers, body) of each."""
    limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:

        async def one(i: int) -> tuple[int, dict[str, str], dict[str, object]]:
            answer = await client.post(
                f"{bases[i % len(bases)]}/b/v1/verify",
                headers={"Authorization": f"Bearer {key}"},
                json={"email": MAILBOXES[i % len(MAILBOXES)], "smtp_check": False},
            )
            return answer.status_code, dict(answer.headers), answer.json()

        return await asyncio.gather(*(one(i) for i in range(count)))


def test_a_key_with_n_credits_gets_exactly_n_verifications_across_two_servers(
    two_servers: tuple[str, list[str]],
) -> None:
    url, bases = two_servers
    credits = 57
    with Store(url) as store:
        key, row = store.create_key("exact", credits, "enterprise")
    answers = asyncio.run(_verify_many(bases, key, 240))
    codes = Counter(code for code, _, _ in answers)
    assert codes == {200: credits, 403: 240 - credits}, codes
    verdicts = Counter(body["status"] for code, _, body in answers if code == 200)
    assert verdicts == {"valid": credits}
    refused = {body["error"]["code"] for code, _, body in answers if code == 403}  # type: ignore[index]
    assert refused == {"INSUFFICIENT_CREDITS"}
    with Store(url) as store:
        account = store.credits(row.id)
    assert (account.balance, account.consumed) == (0, credits)


def test_a_rate_limit_admits_exactly_its_limit_across_two_servers(
    two_servers: tuple[str, list[str]],
) -> None:
    url, bases = two_servers
    per_hour = 61
    with Store(url) as store:
        key, row = store.create_key("limited", 10_000, "free", limits={"b_per_hour": per_hour})
    answers = asyncio.run(_verify_many(bases, key, 200))
    codes = Counter(code for code, _, _ in answers)
    if codes[200] + codes[429] == 200 and codes[200] > per_hour:
        pytest.fail(f"{codes[200]} admitted, over the limit of {per_hour}")
    admitted = [headers for code, headers, _ in answers if code == 200]
    if len(admitted) < per_hour:
        # An hour's window may have turned during the test: then both windows are exact.
        resets = Counter(h["x-ratelimit-reset"] for _, h, _ in answers)
        assert len(resets) == 2, codes
        pytest.skip("the hourly window turned during the test")
    assert codes == {200: per_hour, 429: 200 - per_hour}, codes
    # Each admitted request saw its own place in the window: the counts never overlapped.
    remaining = sorted(int(h["x-ratelimit-remaining"]) for h in admitted)
    assert remaining == list(range(per_hour))
    with Store(url) as store:
        account = store.credits(row.id)
    assert account.consumed == per_hour  # refused requests are neither counted nor charged


def test_a_daily_limit_is_exact_too(two_servers: tuple[str, list[str]]) -> None:
    url, bases = two_servers
    with Store(url) as store:
        key, _ = store.create_key("daily", 10_000, limits={"b_per_hour": 500, "b_per_day": 33})
    answers = asyncio.run(_verify_many(bases, key, 120))
    codes = Counter(code for code, _, _ in answers)
    assert codes == {200: 33, 429: 87}, codes


# -- the batched store calls, in one process --------------------------------------------------


def test_reserve_many_answers_as_one_reservation_after_the_other(store: Store) -> None:
    _, row = store.create_key("batch", 10)
    _, other = store.create_key("other", 2)
    answers = store.reserve_many(
        [(row.id, 4), (other.id, 3), (row.id, 7), (row.id, 5), (other.id, 2), ("nobody", 1)]
    )
    # 10: 4 fits, 7 does not (6 left), 5 fits; the other key's 3 does not, its 2 does
    assert answers == [True, False, False, True, True, False]
    assert store.credits(row.id).balance == 1
    assert store.credits(other.id).balance == 0
    assert store.reserve_many([(row.id, 1), (row.id, 0)]) == [True, True]
    assert store.refund_many([(row.id, 3), (other.id, 5), (row.id, 2)]) == [True, False, True]
    assert (store.credits(row.id).balance, store.credits(row.id).consumed) == (5, 5)


def test_admit_many_answers_as_one_admission_after_the_other(store: Store) -> None:
    key, row = store.create_key("batch", 10, limits={"b_per_hour": 5, "b_per_day": 3})
    other_key, _ = store.create_key("other", 10, "free")
    store.set_key_active(store.create_key("off", 1)[1].id, False)
    requests = [(key, form_b_limits)] * 4 + [
        (other_key, form_b_limits),
        ("lh_unknown", form_b_limits),
    ]
    answers = store.admit_many(requests)
    # the day's 3 go first; the fourth passes the hour but the day refuses it, so it counts in
    # neither window and sees the hour as the first three left it
    hits = [[(h.allowed, h.remaining) for h in found] for _, found in answers]
    assert hits[:4] == [
        [(True, 4), (True, 2)],
        [(True, 3), (True, 1)],
        [(True, 2), (True, 0)],
        [(True, 2), (False, 0)],
    ]
    assert hits[4] == [(True, 99), (True, 999)]
    assert answers[5] == (None, [])
    assert all(found is not None and found.id == row.id for found, _ in answers[:4])
    # the same store one call at a time continues from there: refused by the day, uncounted
    for _ in range(2):
        _, single = store.admit(key, form_b_limits)
        assert [(h.allowed, h.remaining) for h in single] == [(True, 2), (False, 0)]


async def test_coalesced_calls_share_transactions_and_stay_exact(store: Store) -> None:
    key, row = store.create_key("coalesced", 150, limits={"b_per_hour": 400})
    batches = StoreBatches.for_loop(store)
    assert StoreBatches.for_loop(store) is batches  # one per store and event loop

    admitted = await asyncio.gather(*(batches.admit(key, form_b_limits) for _ in range(500)))
    allowed = [hits[-1].allowed for _, hits in admitted]
    assert allowed.count(True) == 400
    remaining = sorted(hits[0].remaining for _, hits in admitted if hits[0].allowed)
    assert remaining == list(range(400))

    reserved = await asyncio.gather(*(batches.reserve(row.id, 1) for _ in range(400)))
    assert reserved.count(True) == 150
    assert store.credits(row.id).balance == 0
    await asyncio.gather(*(batches.refund(row.id, 1) for _ in range(50)))
    assert store.credits(row.id).balance == 50
    assert batches._reserve.batches < batches._reserve.items  # coalesced, not one by one


async def test_a_reservation_whose_request_is_gone_gives_its_credits_back(store: Store) -> None:
    _, row = store.create_key("gone", 20)
    batches = StoreBatches.for_loop(store)
    waiting = [asyncio.ensure_future(batches.reserve(row.id, 2)) for _ in range(10)]
    await asyncio.sleep(0)  # the first batch is in the database; the rest wait for the next
    for task in waiting:
        task.cancel()
    await asyncio.gather(*waiting, return_exceptions=True)
    await asyncio.sleep(0.5)  # the batch that was in the database, and the refund it queued
    account = store.credits(row.id)
    assert (account.balance, account.consumed) == (20, 0)
