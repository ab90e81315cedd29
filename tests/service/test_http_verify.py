"""The service over real HTTP: uvicorn on loopback, a SQLite store, the engine on the sandbox."""

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from listhygiene.results import FORM_A_BATCH_FIELDS, FORM_A_FIELDS
from listhygiene.sandbox import Sandbox
from listhygiene.service.app import create_app
from listhygiene.service.store import Store
from tests.service.live import LiveServer, a, b, engine_for

#: One server per module, on the store of tests/service/conftest.py, on SQLite.
STORE_BACKENDS = ("sqlite",)

VALID = "alice.johnson@acme-corp.test"
NO_MAILBOX = "nobody.here@acme-corp.test"
SERVFAIL = "claire.dupont@humongous-insurance.test"  # unknown, fast
TARPIT = "liam.oconnor@margie-travel.test"  # banner after 3 s

ENVELOPE = {"success", "code", "message", "data"}
ERROR_A = {"success", "code", "message", "error"}
B_RESULT = {"email", "status", "result", "score", "reason", "credits_used"}
B_RESULT_OBJECT = {
    "deliverable",
    "valid_format",
    "valid_domain",
    "valid_mx",
    "disposable",
    "role",
    "catchall",
    "free",
    "smtp_valid",
}
RATE_HEADERS = ("x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset")


class FailingEngine:
    """An engine that always fails: the service must answer 500 without a traceback."""

    async def verify_each(self, emails: Any, *, check_smtp: bool | None = None, **lane: Any) -> Any:
        raise RuntimeError("secret internal detail")
        yield  # pragma: no cover


def new_key(store: Store, credits: int = 100, **kwargs: Any) -> str:
    key, _ = store.create_key("test", credits, **kwargs)
    return key


def assert_a_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == ERROR_A
    assert body["success"] is False
    assert body["code"] == code
    assert body["error"]["code"] == code
    assert isinstance(body["message"], str)
    assert isinstance(body["error"]["message"], str)
    return body


def assert_b_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str)
    return body["error"]


# -- form A: results ---------------------------------------------------------------------------


def test_a_single_valid(client: httpx.Client, store: Store) -> None:
    key = new_key(store)
    response = client.post("/a/v1/verify/single", json={"email": VALID}, headers=a(key))
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == ENVELOPE
    assert (body["success"], body["code"], body["message"]) == (True, "0", "Success")
    data = body["data"]
    assert list(data) == list(FORM_A_FIELDS)
    assert data["email"] == VALID
    assert data["status"] == "valid"
    assert data["is_deliverable"] is True
    assert data["smtp_check"] is True
    assert data["reason"] is None
    assert data["credits_used"] == 1
    assert set(data["domain_reputation"]) == {"mx_ip", "is_listed", "blacklists", "checked"}
    assert store.credits(store.authenticate(key).id).balance == 99  # type: ignore[union-attr]


def test_a_single_invalid_mailbox_and_no_smtp(client: httpx.Client, store: Store) -> None:
    key = new_key(store)
    data = client.post("/a/v1/verify/single", json={"email": NO_MAILBOX}, headers=a(key)).json()[
        "data"
    ]
    assert (data["status"], data["reason"]) == ("invalid", "mailbox_not_found")
    assert list(data) == list(FORM_A_FIELDS)
    data = client.post(
        "/a/v1/verify/single", json={"email": NO_MAILBOX, "check_smtp": False}, headers=a(key)
    ).json()["data"]
    assert (data["status"], data["smtp_check"], data["score"]) == ("valid", False, 0.9)


def test_a_single_invalid_syntax_is_a_result(client: httpx.Client, store: Store) -> None:
    key = new_key(store)
    response = client.post("/a/v1/verify/single", json={"email": "bad@@x"}, headers=a(key))
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    assert list(data) == list(FORM_A_FIELDS)
    assert (data["status"], data["reason"]) == ("invalid", "invalid_syntax")


def test_a_unknown_is_free(client: httpx.Client, store: Store) -> None:
    key = new_key(store, 5)
    data = client.post("/a/v1/verify/single", json={"email": SERVFAIL}, headers=a(key)).json()[
        "data"
    ]
    assert (data["status"], data["credits_used"]) == ("unknown", 0)
    credits = client.get("/a/v1/credits", headers=a(key)).json()["data"]
    assert (credits["credits_balance"], credits["credits_consumed"]) == (5, 0)


def test_a_bulk(client: httpx.Client, store: Store) -> None:
    key = new_key(store, 10)
    emails = [VALID, NO_MAILBOX, SERVFAIL, "bad@@x", VALID]
    response = client.post("/a/v1/verify/bulk", json={"emails": emails}, headers=a(key))
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == ENVELOPE
    assert body["success"] is True
    data = body["data"]
    assert set(data) == {
        "results",
        "total_emails",
        "valid_emails",
        "invalid_emails",
        "credits_used",
        "process_time",
    }
    assert [item["email"] for item in data["results"]] == emails
    for item in data["results"]:
        assert list(item) == list(FORM_A_BATCH_FIELDS)
    assert [item["status"] for item in data["results"]] == [
        "valid",
        "invalid",
        "unknown",
        "invalid",
        "valid",
    ]
    assert (data["total_emails"], data["valid_emails"], data["invalid_emails"]) == (5, 2, 2)
    # distinct addresses, the unknown one free: VALID, NO_MAILBOX, bad@@x
    assert data["credits_used"] == 3
    assert isinstance(data["process_time"], int)
    credits = client.get("/a/v1/credits", headers=a(key)).json()["data"]
    assert (credits["credits_balance"], credits["credits_consumed"]) == (7, 3)


def test_a_bulk_limit(client: httpx.Client, store: Store) -> None:
    key = new_key(store, 100)
    fifty = [f"user{i}@humongous-insurance.test" for i in range(50)]
    response = client.post("/a/v1/verify/bulk", json={"emails": fifty}, headers=a(key))
    assert response.status_code == 200, response.text
    assert response.json()["data"]["total_emails"] == 50
    response = client.post("/a/v1/verify/bulk", json={"emails": [*fifty, VALID]}, headers=a(key))
    assert_a_error(response, 400, "4000")


def test_a_credits(client: httpx.Client, store: Store) -> None:
    key, row = store.create_key("acme", 42)
    response = client.get("/a/v1/credits", headers=a(key))
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    assert list(data) == [
        "account_id",
        "api_key_id",
        "api_key_name",
        "credits_balance",
        "credits_consumed",
        "credits_added",
        "last_updated",
    ]
    assert (data["api_key_id"], data["api_key_name"]) == (row.id, "acme")
    assert (data["credits_balance"], data["credits_consumed"], data["credits_added"]) == (42, 0, 42)
    assert data["last_updated"].endswith("Z")


# -- form A: errors ----------------------------------------------------------------------------


@pytest.mark.parametrize("headers", [{}, {"LISTHYGIENE-API-KEY": "lh_not-a-key"}])
def test_a_401(client: httpx.Client, headers: dict[str, str]) -> None:
    for method, path, body in (
        ("POST", "/a/v1/verify/single", {"email": VALID}),
        ("POST", "/a/v1/verify/bulk", {"emails": [VALID]}),
        ("GET", "/a/v1/credits", None),
    ):
        response = client.request(method, path, json=body, headers=headers)
        assert_a_error(response, 401, "4010")


def test_a_403_for_a_disabled_key_and_back(client: httpx.Client, store: Store) -> None:
    key, row = store.create_key("disabled", 10)
    headers = {"LISTHYGIENE-API-KEY": key}
    assert client.get("/a/v1/credits", headers=headers).status_code == 200
    assert store.set_key_active(row.id, False)
    for method, path, body in (
        ("POST", "/a/v1/verify/single", {"email": VALID}),
        ("POST", "/a/v1/verify/bulk", {"emails": [VALID]}),
        ("GET", "/a/v1/credits", None),
        ("GET", "/a/v1/webhooks", None),
        ("GET", "/a/v1/verify/file/whatever", None),
    ):
        response = client.request(method, path, json=body, headers=headers)
        body_ = assert_a_error(response, 403, "4030")
        assert body_["message"] == "Access denied"
    # form B knows no 403 for keys: the disabled key is invalid there
    bearer = {"Authorization": f"Bearer {key}"}
    assert_b_error(client.get("/b/v1/credits", headers=bearer), 401, "INVALID_API_KEY")
    assert store.credits(row.id).balance == 10  # nothing was charged
    assert store.set_key_active(row.id, True)
    assert client.get("/a/v1/credits", headers=headers).status_code == 200
    assert not store.set_key_active("no-such-id", False)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/a/v1/verify/single", {}),
        ("/a/v1/verify/single", {"email": 42}),
        ("/a/v1/verify/single", {"email": None}),
        ("/a/v1/verify/single", {"email": VALID, "check_smtp": "yes"}),
        ("/a/v1/verify/single", ["not", "an", "object"]),
        ("/a/v1/verify/bulk", {}),
        ("/a/v1/verify/bulk", {"emails": VALID}),
        ("/a/v1/verify/bulk", {"emails": []}),
        ("/a/v1/verify/bulk", {"emails": [VALID, 7]}),
        ("/a/v1/verify/bulk", {"emails": [VALID], "check_smtp": 1}),
    ],
)
def test_a_400(client: httpx.Client, store: Store, path: str, body: Any) -> None:
    key = new_key(store, 5)
    assert_a_error(client.post(path, json=body, headers=a(key)), 400, "4000")
    assert store.credits(store.authenticate(key).id).balance == 5  # type: ignore[union-attr]


def test_a_400_not_json(client: httpx.Client, store: Store) -> None:
    response = client.post(
        "/a/v1/verify/single",
        content=b"{not json",
        headers={**a(new_key(store)), "Content-Type": "application/json"},
    )
    assert_a_error(response, 400, "4000")


def test_a_402(client: httpx.Client, store: Store) -> None:
    key = new_key(store, 0)
    assert_a_error(
        client.post("/a/v1/verify/single", json={"email": VALID}, headers=a(key)), 402, "4020"
    )
    key = new_key(store, 1)
    response = client.post(
        "/a/v1/verify/bulk", json={"emails": [VALID, NO_MAILBOX]}, headers=a(key)
    )
    assert_a_error(response, 402, "4020")
    assert store.credits(store.authenticate(key).id).balance == 1  # type: ignore[union-attr]


def test_a_404(client: httpx.Client, store: Store) -> None:
    for headers in ({}, a(new_key(store))):
        assert_a_error(client.get("/a/v1/no/such/path", headers=headers), 404, "4040")
        assert_a_error(client.post("/a/v1/verify/nothing", headers=headers), 404, "4040")


def test_a_429(client: httpx.Client, store: Store) -> None:
    key = new_key(store, limits={"a_other_per_minute": 2})
    assert client.get("/a/v1/credits", headers=a(key)).status_code == 200
    assert client.get("/a/v1/credits", headers=a(key)).status_code == 200
    response = client.get("/a/v1/credits", headers=a(key))
    assert_a_error(response, 429, "4290")
    assert response.json()["message"] == "Rate limit exceeded"
    assert 1 <= int(response.headers["retry-after"]) <= 60
    # the limit is per endpoint type: single verification still goes through
    response = client.post("/a/v1/verify/single", json={"email": SERVFAIL}, headers=a(key))
    assert response.status_code == 200, response.text


def test_no_docs_routes(client: httpx.Client) -> None:
    # FastAPI's own documentation routes are off; each form serves its hand-written document
    # at /<form>/v1/openapi.json (test_openapi.py)
    for path in ("/docs", "/redoc", "/openapi.json", "/a/v1/docs", "/b/v1/docs", "/b/v1/redoc"):
        assert client.get(path).status_code == 404


# -- form B ------------------------------------------------------------------------------------


def test_b_verify(client: httpx.Client, store: Store) -> None:
    key = new_key(store, 10)
    response = client.post("/b/v1/verify", json={"email": VALID}, headers=b(key))
    assert response.status_code == 200, response.text
    body = response.json()
    assert list(body) == ["email", "status", "result", "score", "reason", "credits_used"]
    assert set(body["result"]) == B_RESULT_OBJECT
    assert (body["status"], body["credits_used"], body["reason"]) == ("valid", 1, None)
    assert body["result"]["smtp_valid"] is True
    for name in RATE_HEADERS:
        assert response.headers[name].isdigit()

    body = client.post("/b/v1/verify", json={"email": NO_MAILBOX}, headers=b(key)).json()
    assert (body["status"], body["reason"]) == ("invalid", "mailbox_not_found")
    body = client.post("/b/v1/verify", json={"email": SERVFAIL}, headers=b(key)).json()
    assert (body["status"], body["credits_used"]) == ("unknown", 0)
    credits = client.get("/b/v1/credits", headers=b(key)).json()
    assert (credits["available"], credits["used"], credits["total"]) == (8, 2, 10)


def test_b_credits(client: httpx.Client, store: Store) -> None:
    key = new_key(store, 7, plan="starter")
    response = client.get("/b/v1/credits", headers=b(key))
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"available", "used", "total", "plan", "resets_at", "rate_limit"}
    assert (body["available"], body["used"], body["total"], body["plan"]) == (7, 0, 7, "starter")
    assert body["rate_limit"] == {"requests_per_hour": 1000, "remaining": 999}
    assert body["resets_at"].endswith("Z")
    assert response.headers["x-ratelimit-limit"] == "1000"
    assert response.headers["x-ratelimit-remaining"] == "999"


@pytest.mark.parametrize(
    "headers", [{}, {"Authorization": "Bearer lh_nope"}, {"Authorization": "Basic abc"}]
)
def test_b_401(client: httpx.Client, headers: dict[str, str]) -> None:
    assert_b_error(
        client.post("/b/v1/verify", json={"email": VALID}, headers=headers), 401, "INVALID_API_KEY"
    )
    assert_b_error(client.get("/b/v1/credits", headers=headers), 401, "INVALID_API_KEY")


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"email": 3},
        {"email": VALID, "smtp_check": "no"},
        {"email": VALID, "timeout": 0},
        {"email": VALID, "timeout": 30_001},
        {"email": VALID, "timeout": "100"},
        [VALID],
    ],
)
def test_b_400_invalid_request(client: httpx.Client, store: Store, body: Any) -> None:
    key = new_key(store, 5)
    response = client.post("/b/v1/verify", json=body, headers=b(key))
    assert_b_error(response, 400, "INVALID_REQUEST")
    for name in RATE_HEADERS:
        assert name in response.headers
    assert store.credits(store.authenticate(key).id).balance == 5  # type: ignore[union-attr]


def test_b_400_invalid_email(client: httpx.Client, store: Store) -> None:
    key = new_key(store, 5)
    response = client.post("/b/v1/verify", json={"email": "bad@@x"}, headers=b(key))
    assert_b_error(response, 400, "INVALID_EMAIL")
    assert store.credits(store.authenticate(key).id).balance == 5  # type: ignore[union-attr]


def test_b_403_insufficient_credits(client: httpx.Client, store: Store) -> None:
    key = new_key(store, 0)
    response = client.post("/b/v1/verify", json={"email": VALID}, headers=b(key))
    assert_b_error(response, 403, "INSUFFICIENT_CREDITS")
    assert "x-ratelimit-limit" in response.headers


def test_b_404(client: httpx.Client, store: Store) -> None:
    for headers in ({}, b(new_key(store))):
        assert_b_error(client.get("/b/v1/no/such/path", headers=headers), 404, "NOT_FOUND")


def test_b_429(client: httpx.Client, store: Store) -> None:
    key = new_key(store, limits={"b_per_hour": 2})
    first = client.get("/b/v1/credits", headers=b(key))
    assert (first.headers["x-ratelimit-limit"], first.headers["x-ratelimit-remaining"]) == (
        "2",
        "1",
    )
    second = client.post("/b/v1/verify", json={"email": "bad@@x"}, headers=b(key))  # counts too
    assert second.status_code == 400
    assert second.headers["x-ratelimit-remaining"] == "0"
    third = client.get("/b/v1/credits", headers=b(key))
    error = assert_b_error(third, 429, "RATE_LIMIT_EXCEEDED")
    reset = int(third.headers["x-ratelimit-reset"])
    assert third.headers["x-ratelimit-remaining"] == "0"
    assert 1 <= error["retry_after"] <= 3600
    assert abs(time.time() + error["retry_after"] - reset) <= 2


def test_b_504_timeout(client: httpx.Client, store: Store) -> None:
    key = new_key(store, 5)
    started = time.monotonic()
    response = client.post("/b/v1/verify", json={"email": TARPIT, "timeout": 1}, headers=b(key))
    assert_b_error(response, 504, "TIMEOUT")
    assert time.monotonic() - started < 2
    assert store.credits(store.authenticate(key).id).balance == 5  # type: ignore[union-attr]


# -- 500s --------------------------------------------------------------------------------------


@pytest.fixture
def failing_url(store: Store) -> Iterator[str]:
    with LiveServer(create_app(store, FailingEngine())) as url:  # type: ignore[arg-type]
        yield url


def test_500_both_forms(failing_url: str, store: Store) -> None:
    key = new_key(store, 5)
    with httpx.Client(base_url=failing_url) as client:
        response = client.post("/a/v1/verify/single", json={"email": VALID}, headers=a(key))
        body = assert_a_error(response, 500, "1000")
        assert body["message"] == "Internal server error"
        assert "secret" not in response.text
        assert "Traceback" not in response.text
        response = client.post("/b/v1/verify", json={"email": VALID}, headers=b(key))
        assert_b_error(response, 500, "INTERNAL_ERROR")
        assert "secret" not in response.text
        assert "x-ratelimit-limit" in response.headers
    # the reserved credits went back
    assert store.credits(store.authenticate(key).id).balance == 5  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("path", "form"),
    [
        ("/a/v1/verify/single", "a"),
        ("/a/v1/verify/bulk", "a"),
        ("/a/v1/webhooks", "a"),
        ("/b/v1/verify", "b"),
        ("/b/v1/verify/bulk", "b"),
        ("/b/v1/webhooks", "b"),
    ],
)
def test_the_key_is_checked_before_the_body(client: httpx.Client, path: str, form: str) -> None:
    """A malformed body without a key is refused for the key (401), not for the body."""
    response = client.post(path, content=b"{not json", headers={"content-type": "application/json"})
    if form == "a":
        assert_a_error(response, 401, "4010")
    else:
        assert_b_error(response, 401, "INVALID_API_KEY")


# -- synchronous requests answer within their deadline ---------------------------------------

SLOW_BATCH = [
    "alice.johnson@acme-corp.test",  # valid, at once
    "nobody.here@acme-corp.test",  # invalid, at once
    "zoe.turner@fourth-coffee.test",  # a host that never speaks
    "liam.oconnor@margie-travel.test",  # a banner after 3 s
    "info@fourth-coffee.test",  # a role account on the silent host
]


@pytest.fixture(scope="module")
def deadline_url(sandbox: Sandbox, store: Store) -> Iterator[str]:
    """A server whose engine would wait a minute per SMTP step, and whose synchronous requests
    may take one second."""
    engine = engine_for(sandbox, smtp_timeout=60)
    with LiveServer(create_app(store, engine, sync_deadline=1)) as url:
        yield url


def test_a_sync_batch_answers_what_it_has_by_its_deadline(deadline_url: str, store: Store) -> None:
    key = new_key(store, credits=10)
    # The client gives up after 20 s: without the deadline the silent host holds the request
    # for its 60 s step time-out and this raises ReadTimeout.
    with httpx.Client(base_url=deadline_url, timeout=20) as client:
        response = client.post(
            "/a/v1/verify/bulk", headers=a(key), json={"emails": SLOW_BATCH, "check_smtp": True}
        )
        assert response.status_code == 200, response.text
        data = response.json()["data"]
        by_email = {r["email"]: r for r in data["results"]}
        assert [r["email"] for r in data["results"]] == SLOW_BATCH
        assert (by_email[SLOW_BATCH[0]]["status"], by_email[SLOW_BATCH[1]]["status"]) == (
            "valid",
            "invalid",
        )
        for late in SLOW_BATCH[2:]:
            assert (by_email[late]["status"], by_email[late]["reason"]) == (
                "unknown",
                "smtp_timeout",
            )
        assert by_email["info@fourth-coffee.test"]["is_role"] is True  # measured flags kept
        assert data["credits_used"] == 2  # the late ones are free
        balance = client.get("/a/v1/credits", headers=a(key)).json()["data"]["credits_balance"]
        assert balance == 8
        single = client.post("/a/v1/verify/single", headers=a(key), json={"email": SLOW_BATCH[2]})
        assert single.status_code == 200
        assert single.json()["data"]["reason"] == "smtp_timeout"
