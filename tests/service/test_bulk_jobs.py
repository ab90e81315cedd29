"""Form B bulk jobs over real HTTP (uvicorn on loopback, SQLite, the engine on the sandbox), and
the job worker against the store: a killed worker's job resumed by another."""

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import event, func, select

from listhygiene.engine import Engine
from listhygiene.sandbox import Sandbox
from listhygiene.service.app import create_app
from listhygiene.service.store import Store
from listhygiene.service.store.jobs import (
    create_bulk_job,
    get_job,
    pending_addresses,
)
from listhygiene.service.store.models import JobResult
from listhygiene.service.worker import JobWorker
from tests.service.live import LiveServer, b, engine_for

#: One server per module, on the store of tests/service/conftest.py, on SQLite.
STORE_BACKENDS = ("sqlite",)

VALID = "alice.johnson@acme-corp.test"
NO_MAILBOX = "nobody.here@acme-corp.test"
SERVFAIL = "claire.dupont@humongous-insurance.test"  # unknown, fast
TARPIT = "liam.oconnor@margie-travel.test"  # banner after 3 s
CATCH_ALL = "nina.patel@fabrikam.test"
NORTHWIND = [
    f"{name}@northwind.test"
    for name in (
        "james.wilson",
        "mary.johnson",
        "robert.brown",
        "patricia.garcia",
        "john.miller",
        "jennifer.davis",
        "michael.rodriguez",
        "linda.martinez",
        "david.hernandez",
        "elizabeth.lopez",
        "william.gonzalez",
        "barbara.anderson",
    )
]

SUBMISSION = {
    "job_id",
    "status",
    "total",
    "processed",
    "valid",
    "invalid",
    "unknown",
    "accept_all",
    "credits_used",
    "created_at",
}
RATE_HEADERS = ("x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset")


class FailingEngine:
    """An engine that always fails: the job fails, its credits come back. It fails after a
    moment, so that the test sees the job's reservation before the refund."""

    async def verify_each(self, emails: Any, *, check_smtp: bool | None = None, **lane: Any) -> Any:
        await asyncio.sleep(0.5)
        raise RuntimeError("secret internal detail")
        yield  # pragma: no cover


class SlowEngine:
    """The real engine, one address at a time with a pause, recording what it verified."""

    def __init__(self, engine: Engine, pause: float) -> None:
        self.engine = engine
        self.pause = pause
        self.verified: list[str] = []

    async def verify_each(
        self, emails: Any, *, check_smtp: bool | None = None, **lane: Any
    ) -> AsyncIterator[tuple[object, Any]]:
        for email in list(emails):
            await asyncio.sleep(self.pause)
            async for pair in self.engine.verify_each([email], check_smtp=check_smtp, **lane):
                self.verified.append(str(pair[0]))
                yield pair


#: What the service's webhook resolver answers here (no public name resolves on this machine).
NAMES = {"hooks.example.com": "93.184.215.14", "inside.example.com": "10.20.30.40"}


async def resolve(host: str, port: int) -> list[str]:
    if host not in NAMES:
        raise OSError(f"unknown host {host}")
    return [NAMES[host]]


@pytest.fixture(scope="module")
def base_url(sandbox: Sandbox, store: Store) -> Iterator[str]:
    app = create_app(store, engine_for(sandbox), webhook_resolver=resolve)
    with LiveServer(app) as url:
        yield url


def new_key(store: Store, credits: int = 100, **kwargs: Any) -> str:
    key, _ = store.create_key("test", credits, **kwargs)
    return key


def key_id(store: Store, key: str) -> str:
    row = store.authenticate(key)
    assert row is not None
    return row.id


def assert_b_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str)
    for header in RATE_HEADERS:
        assert header in response.headers
    return body["error"]


def wait_done(client: httpx.Client, key: str, job_id: str, seconds: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while True:
        response = client.get(f"/b/v1/verify/bulk/{job_id}", headers=b(key))
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        if body["status"] in ("completed", "failed"):
            return body
        assert time.monotonic() < deadline, body
        time.sleep(0.1)


# -- submission, status, results ------------------------------------------------------------------

MIXED = [
    VALID,
    NO_MAILBOX,
    SERVFAIL,
    "not-an-email",
    CATCH_ALL,
    VALID,
    " alice.johnson@ACME-corp.test ",
]


@pytest.fixture(scope="module")
def done_job(store: Store, base_url: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """A completed job of MIXED: (key, submission response, final status)."""
    key = new_key(store, 100)
    with httpx.Client(base_url=base_url, timeout=30) as client:
        response = client.post("/b/v1/verify/bulk", headers=b(key), json={"emails": MIXED})
        assert response.status_code == 200, response.text
        for header in RATE_HEADERS:
            assert header in response.headers
        submitted = response.json()
        final = wait_done(client, key, submitted["job_id"])
    return key, submitted, final


def test_submission_response(store: Store, done_job: Any) -> None:
    _, submitted, _ = done_job
    assert set(submitted) == SUBMISSION
    assert submitted["status"] == "processing"
    assert submitted["total"] == len(MIXED)
    assert submitted["processed"] == 0
    assert (submitted["valid"], submitted["invalid"], submitted["unknown"]) == (0, 0, 0)
    # distinct addresses: the two spellings of VALID are one
    assert submitted["credits_used"] == 5
    assert submitted["created_at"].endswith("Z")


def test_completed_status(done_job: Any) -> None:
    _, submitted, final = done_job
    assert set(final) == SUBMISSION | {"progress_percent", "completed_at"}
    assert final["status"] == "completed"
    assert final["job_id"] == submitted["job_id"]
    assert final["progress_percent"] == 100
    assert final["completed_at"].endswith("Z")
    assert final["completed_at"] >= final["created_at"]
    assert final["processed"] == final["total"] == len(MIXED)
    assert final["valid"] == 3  # VALID three times
    assert final["invalid"] == 2  # NO_MAILBOX, not-an-email
    assert final["unknown"] == 1
    assert final["accept_all"] == 1
    assert final["valid"] + final["invalid"] + final["unknown"] + final["accept_all"] == len(MIXED)


def test_credits_reserved_then_unknown_refunded(store: Store, done_job: Any) -> None:
    key, _, final = done_job
    # 5 reserved at submission; the unknown one came back
    assert final["credits_used"] == 4
    credits = store.credits(key_id(store, key))
    assert (credits.balance, credits.consumed) == (96, 4)


def test_results_items_in_order(client: httpx.Client, done_job: Any) -> None:
    key, submitted, _ = done_job
    response = client.get(f"/b/v1/verify/bulk/{submitted['job_id']}/results", headers=b(key))
    assert response.status_code == 200, response.text
    for header in RATE_HEADERS:
        assert header in response.headers
    page = response.json()
    assert set(page) == {"job_id", "total", "limit", "offset", "results"}
    assert (page["job_id"], page["total"], page["limit"], page["offset"]) == (
        submitted["job_id"],
        len(MIXED),
        100,
        0,
    )
    items = page["results"]
    assert [i["email"] for i in items] == MIXED
    assert [i["status"] for i in items] == [
        "valid",
        "invalid",
        "unknown",
        "invalid",
        "accept_all",
        "valid",
        "valid",
    ]
    for item in items:
        assert {"email", "status", "score", "result"} <= set(item)
        assert {"deliverable", "disposable", "role", "reason"} <= set(item["result"])
        assert 0 <= item["score"] <= 1
    assert items[1]["result"]["reason"] == "mailbox_not_found"
    assert items[0]["result"]["reason"] is None


@pytest.mark.parametrize(
    ("status", "expected"),
    [("valid", [0, 5, 6]), ("invalid", [1, 3]), ("unknown", [2]), ("accept_all", [4])],
)
def test_results_status_filter(
    client: httpx.Client, done_job: Any, status: str, expected: list[int]
) -> None:
    key, submitted, _ = done_job
    url = f"/b/v1/verify/bulk/{submitted['job_id']}/results"
    page = client.get(url, headers=b(key), params={"status": status}).json()
    assert page["total"] == len(expected)
    assert [i["email"] for i in page["results"]] == [MIXED[n] for n in expected]
    assert {i["status"] for i in page["results"]} == {status}


def test_results_paging(client: httpx.Client, done_job: Any) -> None:
    key, submitted, _ = done_job
    url = f"/b/v1/verify/bulk/{submitted['job_id']}/results"
    seen = []
    for offset in range(0, len(MIXED), 2):
        page = client.get(url, headers=b(key), params={"limit": 2, "offset": offset}).json()
        assert (page["total"], page["limit"], page["offset"]) == (len(MIXED), 2, offset)
        assert len(page["results"]) <= 2
        seen += [i["email"] for i in page["results"]]
    assert seen == MIXED
    page = client.get(url, headers=b(key), params={"status": "valid", "limit": 1, "offset": 2})
    assert page.json()["total"] == 3
    assert [i["email"] for i in page.json()["results"]] == [MIXED[6]]
    past = client.get(url, headers=b(key), params={"offset": 50}).json()
    assert past["results"] == []
    assert past["total"] == len(MIXED)
    assert client.get(url, headers=b(key), params={"limit": 1000}).status_code == 200


@pytest.mark.parametrize("offset", [2**31, 2**63 - 1, 2**63, 2**64 + 1, 10**30, 10**400])
def test_a_huge_offset_is_an_empty_page(client: httpx.Client, done_job: Any, offset: int) -> None:
    key, submitted, _ = done_job
    url = f"/b/v1/verify/bulk/{submitted['job_id']}/results"
    response = client.get(url, headers=b(key), params={"offset": str(offset)})
    assert response.status_code == 200, response.text
    page = response.json()
    assert (page["results"], page["total"], page["offset"]) == ([], len(MIXED), offset)


@pytest.mark.parametrize(
    "params",
    [
        {"offset": "1e30"},
        {"offset": "1.5"},
        {"offset": "-9223372036854775809"},
        {"limit": "1e3"},
        {"limit": 2**63},
        {"limit": 0},
        {"limit": 1001},
        {"limit": "ten"},
        {"offset": -1},
        {"offset": "x"},
        {"status": "bogus"},
        {"status": "VALID"},
    ],
)
def test_results_bad_parameters(client: httpx.Client, done_job: Any, params: Any) -> None:
    key, submitted, _ = done_job
    url = f"/b/v1/verify/bulk/{submitted['job_id']}/results"
    assert_b_error(client.get(url, headers=b(key), params=params), 400, "INVALID_REQUEST")


_NUMBER = st.one_of(
    st.integers(),
    st.integers(min_value=2**62, max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet="0123456789eE+-.x ", max_size=30),
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(limit=_NUMBER, offset=_NUMBER)
def test_any_paging_number_is_a_page_or_a_400(
    client: httpx.Client, done_job: Any, limit: Any, offset: Any
) -> None:
    """Property: whatever numbers a client sends, the answer is a page or form B's 400."""
    key, submitted, _ = done_job
    url = f"/b/v1/verify/bulk/{submitted['job_id']}/results"
    response = client.get(url, headers=b(key), params={"limit": str(limit), "offset": str(offset)})
    assert response.status_code in (200, 400), response.text
    if response.status_code == 400:
        assert response.json()["error"]["code"] == "INVALID_REQUEST"
    else:
        assert response.json()["total"] == len(MIXED)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(timeout=st.one_of(st.integers(), st.floats(), st.booleans(), st.none()))
def test_any_verify_timeout_is_a_result_or_a_400(
    client: httpx.Client, store: Store, timeout: Any
) -> None:
    key = new_key(store, 10)
    body = json.dumps({"email": VALID, "smtp_check": False, "timeout": timeout})
    response = client.post(
        "/b/v1/verify", headers={**b(key), "Content-Type": "application/json"}, content=body
    )
    assert response.status_code in (200, 400, 504), response.text
    if response.status_code == 400:
        assert response.json()["error"]["code"] == "INVALID_REQUEST"


def test_unknown_and_foreign_jobs(client: httpx.Client, store: Store, done_job: Any) -> None:
    _, submitted, _ = done_job
    other = new_key(store)
    for path in ("", "/results"):
        for job_id, key in (("01NOSUCHJOB0000000000000000", other), (submitted["job_id"], other)):
            response = client.get(f"/b/v1/verify/bulk/{job_id}{path}", headers=b(key))
            assert_b_error(response, 404, "JOB_NOT_FOUND")


def test_unauthenticated(client: httpx.Client, done_job: Any) -> None:
    _, submitted, _ = done_job
    for response in (
        client.post("/b/v1/verify/bulk", json={"emails": [VALID]}),
        client.get(f"/b/v1/verify/bulk/{submitted['job_id']}"),
        client.get(f"/b/v1/verify/bulk/{submitted['job_id']}/results", headers=b("lh_nope")),
    ):
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "INVALID_API_KEY"


def test_results_of_a_job_in_progress(client: httpx.Client, store: Store) -> None:
    key = new_key(store)
    response = client.post("/b/v1/verify/bulk", headers=b(key), json={"emails": [TARPIT]})
    job_id = response.json()["job_id"]
    status = client.get(f"/b/v1/verify/bulk/{job_id}", headers=b(key)).json()
    assert status["status"] == "processing"
    assert set(status) == SUBMISSION | {"progress_percent"}
    assert status["progress_percent"] == 0
    results = client.get(f"/b/v1/verify/bulk/{job_id}/results", headers=b(key))
    assert_b_error(results, 400, "INVALID_REQUEST")
    final = wait_done(client, key, job_id)
    assert final["status"] == "completed"
    assert final["processed"] == 1


@pytest.mark.parametrize(
    "body",
    [
        {"emails": []},
        {"emails": [VALID] * 10_001},
        {"emails": VALID},
        {"emails": [VALID, 3]},
        {"emails": None},
        {},
        {"emails": [VALID], "smtp_check": "yes"},
        {"emails": [VALID], "webhook_url": 5},
        [VALID],
    ],
)
def test_bad_submissions(client: httpx.Client, store: Store, body: Any) -> None:
    key = new_key(store)
    response = client.post("/b/v1/verify/bulk", headers=b(key), json=body)
    assert_b_error(response, 400, "INVALID_REQUEST")
    assert store.credits(key_id(store, key)).balance == 100


def test_malformed_json(client: httpx.Client, store: Store) -> None:
    key = new_key(store)
    response = client.post(
        "/b/v1/verify/bulk",
        headers={**b(key), "Content-Type": "application/json"},
        content=b"{not json",
    )
    assert_b_error(response, 400, "INVALID_REQUEST")


def test_ten_thousand_is_accepted(client: httpx.Client, store: Store) -> None:
    key = new_key(store, 10)
    emails = [f"not an address {i}" for i in range(10_000)]
    # 10,000 distinct: over the balance, but the size itself is accepted
    response = client.post("/b/v1/verify/bulk", headers=b(key), json={"emails": emails})
    assert_b_error(response, 403, "INSUFFICIENT_CREDITS")


def test_insufficient_credits(client: httpx.Client, store: Store) -> None:
    key = new_key(store, 2)
    response = client.post(
        "/b/v1/verify/bulk", headers=b(key), json={"emails": [VALID, NO_MAILBOX, SERVFAIL]}
    )
    assert_b_error(response, 403, "INSUFFICIENT_CREDITS")
    credits = store.credits(key_id(store, key))
    assert (credits.balance, credits.consumed) == (2, 0)
    # duplicates count once: two distinct addresses fit
    response = client.post(
        "/b/v1/verify/bulk", headers=b(key), json={"emails": [VALID, NO_MAILBOX, VALID]}
    )
    assert response.status_code == 200, response.text
    assert response.json()["credits_used"] == 2
    assert store.credits(key_id(store, key)).balance == 0


def test_webhook_url_is_stored(client: httpx.Client, store: Store) -> None:
    key = new_key(store)
    url = "https://hooks.example.com/bulk"
    response = client.post(
        "/b/v1/verify/bulk",
        headers=b(key),
        json={"emails": [SERVFAIL], "smtp_check": False, "webhook_url": url},
    )
    assert response.status_code == 200, response.text
    job = get_job(store, key_id(store, key), response.json()["job_id"])
    assert job is not None
    assert job.webhook_url == url
    assert job.check_smtp is False
    wait_done(client, key, job.id)


@pytest.mark.parametrize(
    "url",
    [
        "https://127.0.0.1/hook",
        "https://169.254.169.254/latest/meta-data/",
        "https://[::1]/hook",
        "https://[::ffff:169.254.169.254]/",
        "https://[2002:a9fe:a9fe::]/",  # 6to4 of the metadata address
        "https://[64:ff9b::a9fe:a9fe]/",  # NAT64 of it
        "https://inside.example.com/hook",  # a name that resolves to a private address
        "https://nowhere.example.com/hook",  # a name that does not resolve
        "https://hooks.example.com:70000/hook",
        "http://hooks.example.com/hook",
        "file:///etc/passwd",
        "gopher://hooks.example.com/_hello",
        "https://hooks.example.com/" + "x" * 2048,
    ],
)
def test_webhook_url_is_checked_at_submission(client: httpx.Client, store: Store, url: str) -> None:
    """The rule of registered webhooks (PRODUCT.md) at submission: the client hears of it."""
    key = new_key(store, credits=5)
    response = client.post(
        "/b/v1/verify/bulk", headers=b(key), json={"emails": [VALID], "webhook_url": url}
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "INVALID_REQUEST"
    assert store.credits(key_id(store, key)).balance == 5  # nothing reserved, no job


# -- failure --------------------------------------------------------------------------------------


def test_failed_job(tmp_path: Path) -> None:
    with Store(f"sqlite:///{tmp_path / 'failing.db'}") as store:
        key = new_key(store, 10)
        with (
            LiveServer(create_app(store, FailingEngine())) as url,  # type: ignore[arg-type]
            httpx.Client(base_url=url, timeout=30) as client,
        ):
            response = client.post(
                "/b/v1/verify/bulk", headers=b(key), json={"emails": [VALID, NO_MAILBOX]}
            )
            assert response.status_code == 200, response.text
            assert store.credits(key_id(store, key)).balance == 8
            final = wait_done(client, key, response.json()["job_id"])
            assert final["status"] == "failed"
            assert set(final["error"]) == {"code", "message"}
            assert "secret" not in final["error"]["message"]
            assert "completed_at" not in final
            assert final["credits_used"] == 0
            results = client.get(f"/b/v1/verify/bulk/{final['job_id']}/results", headers=b(key))
            assert_b_error(results, 400, "INVALID_REQUEST")
        credits = store.credits(key_id(store, key))
        assert (credits.balance, credits.consumed) == (10, 0)


# -- a killed worker's job is resumed -------------------------------------------------------------


async def _until(condition: Any, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not await asyncio.to_thread(condition):
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_killed_worker_job_is_resumed_once(tmp_path: Path, sandbox: Sandbox) -> None:
    emails = [*NORTHWIND, SERVFAIL, NORTHWIND[0], "bad address"]
    distinct = len(NORTHWIND) + 2
    with Store(f"sqlite:///{tmp_path / 'resume.db'}") as store:
        key = new_key(store, 50)
        kid = key_id(store, key)
        job = create_bulk_job(store, kid, emails, check_smtp=True, webhook_url=None)
        assert store.credits(kid).balance == 50 - distinct

        def saved() -> int:
            with store.transaction() as conn:
                return int(
                    conn.execute(
                        select(func.count()).where(JobResult.job_id == job.id)
                    ).scalar_one()
                )

        real = engine_for(sandbox)
        first = SlowEngine(real, pause=0.1)
        worker = JobWorker(store, first, stale_after=1, batch_size=1, poll_seconds=0.05)
        await worker.start()
        await _until(lambda: saved() >= 4)
        await worker.stop(release=False)  # a kill: the claim stays, as stale as it gets
        done_before = saved()
        pending = pending_addresses(store, job.id)
        assert 0 < len(pending) < distinct
        assert len(pending) + done_before == distinct
        assert get_job(store, kid, job.id).status == "processing"  # type: ignore[union-attr]

        second = SlowEngine(real, pause=0)
        started = time.monotonic()
        other = JobWorker(store, second, stale_after=1, poll_seconds=0.05)
        await other.start()
        try:
            await _until(lambda: get_job(store, kid, job.id).status == "completed")  # type: ignore[union-attr]
        finally:
            await other.stop()
        assert time.monotonic() - started >= 0.5  # it waited for the claim to go stale
        # the second worker verified exactly what was missing
        assert sorted(second.verified) == sorted(pending)
        assert saved() == distinct

        final = get_job(store, kid, job.id)
        assert final is not None
        assert final.processed == final.total == len(emails)
        assert final.unknown == 1
        assert final.invalid == 1
        assert final.valid == len(NORTHWIND) + 1
        assert final.credits_reserved == distinct
        assert final.credits_used == distinct - 1  # the unknown one is free
        credits = store.credits(kid)
        assert (credits.balance, credits.consumed) == (50 - distinct + 1, distinct - 1)


async def test_a_job_s_rows_are_read_once_however_many_saves(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    # Form B counts submitted rows, duplicates included. How many rows each address has was read
    # for every save, and on a PostgreSQL job just written that read cost about 35 ms of the
    # database's CPU a save (docs/service.md, "Fairness"): a worker reads it once per job.
    emails = [*NORTHWIND, NORTHWIND[0], NORTHWIND[0], NORTHWIND[3], "bad address"]
    with Store(f"sqlite:///{tmp_path / 'copies.db'}") as store:
        kid = key_id(store, new_key(store, 50))
        job = create_bulk_job(store, kid, emails, check_smtp=True, webhook_url=None)
        reads: list[str] = []

        def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
            if statement.lstrip().upper().startswith("SELECT") and "job_rows" in statement:
                reads.append(statement)

        event.listen(store.engine, "before_cursor_execute", record)
        worker = JobWorker(store, engine_for(sandbox), batch_size=2, poll_seconds=0.05)
        await worker.start()
        try:
            await _until(lambda: get_job(store, kid, job.id).status == "completed")  # type: ignore[union-attr]
        finally:
            await worker.stop()
            event.remove(store.engine, "before_cursor_execute", record)
        final = get_job(store, kid, job.id)
        assert final is not None
        # 13 distinct addresses in saves of 2: 7 saves, and two reads of the rows in all (the
        # addresses to verify, and those submitted more than once)
        assert len(reads) == 2, reads
        assert final.processed == final.total == len(emails)
        assert final.valid == len(NORTHWIND) + 3  # the duplicates each count as a row
        assert final.invalid == 1
        assert final.credits_used == len(NORTHWIND) + 1  # an invalid verdict is charged


async def test_clean_stop_releases_the_job(tmp_path: Path, sandbox: Sandbox) -> None:
    with Store(f"sqlite:///{tmp_path / 'release.db'}") as store:
        kid = key_id(store, new_key(store, 50))
        job = create_bulk_job(store, kid, NORTHWIND, check_smtp=True, webhook_url=None)
        real = engine_for(sandbox)
        worker = JobWorker(store, SlowEngine(real, pause=0.2), stale_after=60, poll_seconds=0.05)
        await worker.start()
        await _until(lambda: get_job(store, kid, job.id).claimed_by is not None)  # type: ignore[union-attr]
        await asyncio.sleep(0.5)
        await worker.stop()
        assert get_job(store, kid, job.id).claimed_by is None  # type: ignore[union-attr]
        # with a 60 s stale_after, only a released job is taken again at once
        second = SlowEngine(real, pause=0)
        other = JobWorker(store, second, stale_after=60, poll_seconds=0.05)
        await other.start()
        try:
            await _until(lambda: get_job(store, kid, job.id).status == "completed", 20)  # type: ignore[union-attr]
        finally:
            await other.stop()
        assert len(set(second.verified)) == len(second.verified)
        final = get_job(store, kid, job.id)
        assert final is not None
        assert final.processed == len(NORTHWIND)
        assert store.credits(kid).consumed == len(NORTHWIND)


# -- the store's job functions on both databases --------------------------------------------------


def test_claims_saves_and_settles_once(empty_db_url: str) -> None:
    # A database of its own: the session's shared PostgreSQL one is read whole by other tests.
    from listhygiene.results import VerificationResult
    from listhygiene.service.store.jobs import (
        LostClaim,
        claim_job,
        finish_job,
        results_page,
        save_results,
    )

    with Store(empty_db_url) as store:
        kid = key_id(store, new_key(store, 10))
        job = create_bulk_job(store, kid, ["a@x.test", "b@x.test", "a@x.test"], check_smtp=False)
        assert (job.total, job.unique, job.credits_reserved, job.status) == (3, 2, 2, "processing")
        assert store.credits(kid).balance == 8
        claimed = claim_job(store, "w1")
        assert claimed is not None
        assert (claimed.id, claimed.claimed_by) == (job.id, "w1")
        assert claim_job(store, "w2") is None  # held, not stale
        time.sleep(0.3)
        stolen = claim_job(store, "w2", stale_after=0.1)
        assert stolen is not None
        assert (stolen.id, stolen.claimed_by) == (job.id, "w2")
        result = VerificationResult(email="a@x.test", status="valid", score=0.9, credits_used=1)
        with pytest.raises(LostClaim):
            save_results(store, job.id, [("a@x.test", result)], worker_id="w1")
        with pytest.raises(LostClaim):  # no such job, with or without a worker
            save_results(store, "no-such-job", [("a@x.test", result)])
        assert save_results(store, job.id, [("a@x.test", result)], worker_id="w2") == 1
        assert save_results(store, job.id, [("a@x.test", result)], worker_id="w2") == 0
        assert pending_addresses(store, job.id) == ["b@x.test"]
        current = get_job(store, kid, job.id)
        assert current is not None
        assert (current.processed, current.credits_used) == (2, 1)
        assert finish_job(store, job.id, "w1") is None  # not its job
        done = finish_job(store, job.id, "w2")
        assert done is not None
        assert done.status == "completed"
        assert finish_job(store, job.id) is None  # settled once
        credits = store.credits(kid)
        assert (credits.balance, credits.consumed) == (9, 1)
        total, rows = results_page(store, job.id, None, 10, 0)
        assert total == 2
        assert [email for email, _ in rows] == ["a@x.test", "a@x.test"]
        assert get_job(store, "someone else", job.id) is None


def test_closing_a_job_queues_its_webhook_event_in_the_same_transaction(
    empty_db_url: str,
) -> None:
    import json

    from listhygiene.results import VerificationResult
    from listhygiene.service.delivery import form_b_payload_signature
    from listhygiene.service.events import announce_job
    from listhygiene.service.store import webhooks as webhook_store
    from listhygiene.service.store.jobs import fail_job, finish_job, save_results
    from listhygiene.service.store.models import WebhookOutbox
    from listhygiene.statuses import DnsOutcome, Facts

    with Store(empty_db_url) as store:
        kid = key_id(store, new_key(store, 10))
        registered = webhook_store.create(
            store,
            kid,
            "b",
            url="https://hooks.example.com/b",
            events=["bulk.completed", "bulk.failed"],
            secret="s3cret",
        )
        done = create_bulk_job(
            store, kid, ["a@x.test"], check_smtp=False, webhook_url="https://hooks.example.com/b"
        )
        result = VerificationResult.from_facts(
            "a@x.test", Facts(syntax_valid=True, dns=DnsOutcome.MX)
        )  # valid in both forms
        save_results(store, done.id, [("a@x.test", result)])
        finish_job(store, done.id, announce=announce_job)
        failed = create_bulk_job(
            store,
            kid,
            ["b@x.test"],
            check_smtp=False,
            webhook_url="https://elsewhere.example.com/hook",
        )
        fail_job(store, failed.id, "INTERNAL_ERROR", "boom", announce=announce_job)
        finish_job(store, done.id, announce=announce_job)  # closing twice queues nothing more
        with store.transaction() as conn:
            rows = conn.execute(
                select(
                    WebhookOutbox.url,
                    WebhookOutbox.event,
                    WebhookOutbox.payload,
                    WebhookOutbox.secret,
                ).order_by(WebhookOutbox.id)
            ).all()
            queued = [(url, event, json.loads(body), secret) for url, event, body, secret in rows]
    # completed: the registered webhook once (it is also the job's webhook_url), signed
    url, event, payload, secret = queued[0]
    assert (url, event, secret) == ("https://hooks.example.com/b", "bulk.completed", "s3cret")
    assert payload["data"] == {
        "job_id": done.id,
        "status": "completed",
        "total": 1,
        "valid": 1,
        "invalid": 0,
        "unknown": 0,
    }
    assert payload["signature"] == form_b_payload_signature(payload, "s3cret")
    # failed: the registered webhook, and the other webhook_url unsigned
    assert [(q[0], q[1], q[3]) for q in queued[1:]] == [
        ("https://hooks.example.com/b", "bulk.failed", "s3cret"),
        ("https://elsewhere.example.com/hook", "bulk.failed", None),
    ]
    assert len(queued) == 3
    assert registered.id


@pytest.mark.timeout(60)
def test_an_idle_claim_takes_no_write_lock(tmp_path: Any) -> None:
    """With nothing to claim, a worker's poll only reads: on SQLite it neither waits for another
    process's write lock nor holds the server processes' writes behind its own (docs/service.md,
    "The job runner")."""
    import sqlite3

    from listhygiene.service.store.jobs import claim_job

    path = tmp_path / "idle.db"
    with Store(f"sqlite:///{path}") as store:
        other = sqlite3.connect(path, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")  # another process writing, for as long as it likes
            assert claim_job(store, "w1") is None  # answered at once, not after the busy time-out
        finally:
            other.execute("ROLLBACK")
            other.close()
