"""Every error code of both forms' tables becomes its exception of listhygiene.errors; whatever is
not an answer becomes a ClientError, and no httpx exception leaks."""

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from listhygiene import errors
from listhygiene.clients import (
    ClientConnectionError,
    ClientError,
    ClientTimeoutError,
    UnexpectedResponseError,
)
from listhygiene.clients._exceptions import from_httpx
from tests.clients.fakes import Both, FakeService, FakeTime, make_client, recorded

A = recorded("form_a.json")
B = recorded("form_b.json")

CALLS_A: dict[str, tuple[str, str, Callable[[Both], Any]]] = {
    "verify_single": ("POST", "/a/v1/verify/single", lambda c: c.verify_single("x@example.com")),
    "verify_bulk": ("POST", "/a/v1/verify/bulk", lambda c: c.verify_bulk(["x@example.com"])),
    "submit_file": (
        "POST",
        "/a/v1/verify/file",
        lambda c: c.submit_file(b"x@example.com\n", file_name="l.txt"),
    ),
    "file_job": ("GET", "/a/v1/verify/file/job_missing", lambda c: c.file_job("job_missing")),
    "credits": ("GET", "/a/v1/credits", lambda c: c.credits()),
    "list_webhooks": ("GET", "/a/v1/webhooks", lambda c: c.list_webhooks()),
}
CALLS_B: dict[str, tuple[str, str, Callable[[Both], Any]]] = {
    "verify": ("POST", "/b/v1/verify", lambda c: c.verify("x@example.com")),
    "submit_bulk": ("POST", "/b/v1/verify/bulk", lambda c: c.submit_bulk(["x@example.com"])),
    "bulk_job": ("GET", "/b/v1/verify/bulk/bulk_missing", lambda c: c.bulk_job("bulk_missing")),
    "bulk_results": (
        "GET",
        "/b/v1/verify/bulk/j1/results",
        lambda c: c.bulk_results("j1", limit=1000),
    ),
    "credits": ("GET", "/b/v1/credits", lambda c: c.credits()),
    "list_webhooks": ("GET", "/b/v1/webhooks", lambda c: c.list_webhooks()),
    "delete_webhook": (
        "DELETE",
        "/b/v1/webhooks/wh_missing",
        lambda c: c.delete_webhook("wh_missing"),
    ),
}


def _client(form: str, mode: str, service: FakeService, fake_time: FakeTime) -> Both:
    return make_client(form, mode, service, fake_time, max_retries=0)


def test_the_tables_are_complete() -> None:
    """The recorded errors cover every code of both spec tables (and PRODUCT.md's form B extras)."""
    assert {e["code"] for e in A["errors"]} == set(errors.FORM_A_ERRORS)
    assert {e["code"] for e in B["errors"]} == set(errors.FORM_B_ERRORS)


@pytest.mark.parametrize("case", A["errors"], ids=lambda e: e["code"])
def test_form_a_error_codes(
    case: dict, mode: str, service: FakeService, fake_time: FakeTime
) -> None:
    method, path, call = CALLS_A[case["call"]]
    envelope = {
        "success": False,
        "code": case["code"],
        "message": case["message"],
        "error": {"code": case["code"], "message": case["detail"]},
    }
    headers = {"Retry-After": "7"} if case["status"] == 429 else {}
    service.on(method, path, httpx.Response(case["status"], json=envelope, headers=headers))
    client = _client("a", mode, service, fake_time)
    try:
        with pytest.raises(getattr(errors, case["exception"])) as raised:
            call(client)
    finally:
        client.close()
    error = raised.value
    assert isinstance(error, getattr(errors, case["meaning"]))
    assert isinstance(error, errors.FormAError)
    assert (error.status, error.code) == (case["status"], case["code"])
    assert error.message == case["message"]
    assert error.details == case["detail"]
    assert error.retry_after == (7 if case["status"] == 429 else None)
    assert len(service.requests) == 1  # no retry with max_retries=0


@pytest.mark.parametrize("case", B["errors"], ids=lambda e: e["code"])
def test_form_b_error_codes(
    case: dict, mode: str, service: FakeService, fake_time: FakeTime
) -> None:
    method, path, call = CALLS_B[case["call"]]
    error_body = {k: case[k] for k in ("code", "message", "details", "retry_after") if k in case}
    rate = {"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "50", "X-RateLimit-Reset": "1"}
    service.on(
        method, path, httpx.Response(case["status"], json={"error": error_body}, headers=rate)
    )
    client = _client("b", mode, service, fake_time)
    try:
        with pytest.raises(getattr(errors, case["exception"])) as raised:
            call(client)
    finally:
        client.close()
    error = raised.value
    assert isinstance(error, getattr(errors, case["meaning"]))
    assert isinstance(error, errors.FormBError)
    assert (error.status, error.code) == (case["status"], case["code"])
    assert error.message == case["message"]
    assert error.details == case.get("details")
    assert error.retry_after == case.get("retry_after")
    assert len(service.requests) == 1


def test_an_unknown_code_still_gets_its_meaning(client_b: Both, service: FakeService) -> None:
    service.on(
        "POST",
        "/b/v1/verify",
        httpx.Response(402, json={"error": {"code": "PAYMENT_REQUIRED", "message": "Pay"}}),
    )
    with pytest.raises(errors.InsufficientCreditsError) as raised:
        client_b.verify("x@example.com")
    assert raised.value.code == "PAYMENT_REQUIRED"


def test_a_proxy_page_is_a_server_error(client_a: Both, service: FakeService) -> None:
    service.on("POST", "/a/v1/verify/single", httpx.Response(502, text="<html>Bad gateway</html>"))
    with pytest.raises(errors.ServerError) as raised:
        client_a.verify_single("x@example.com")
    assert raised.value.status == 502


@pytest.mark.parametrize(
    "answer",
    [
        {"text": "not json"},
        {"json": {"success": True, "code": "0", "message": "Success"}},
        {"json": {"success": True, "code": "0", "data": {"email": "x"}}},
        {"json": [1, 2]},
    ],
)
def test_a_success_not_in_the_forms_shape(
    client_a: Both, service: FakeService, answer: dict[str, Any]
) -> None:
    service.on("POST", "/a/v1/verify/single", httpx.Response(200, **answer))
    with pytest.raises(UnexpectedResponseError) as raised:
        client_a.verify_single("x@example.com")
    assert raised.value.status == 200
    assert raised.value.__cause__ is not None


def test_network_error_keeps_its_cause(client_a: Both, service: FakeService) -> None:
    refused = httpx.ConnectError("Connection refused")
    service.on("GET", "/a/v1/credits", refused)
    with pytest.raises(ClientConnectionError) as raised:
        client_a.credits()
    assert raised.value.__cause__ is refused
    assert not isinstance(raised.value, ClientTimeoutError)
    assert len(service.requests) == 4  # a read is retried: 1 + max_retries


def test_timeout_is_a_client_timeout(client_b: Both, service: FakeService) -> None:
    service.on("POST", "/b/v1/verify", httpx.ReadTimeout("timed out"))
    with pytest.raises(ClientTimeoutError) as raised:
        client_b.verify("x@example.com")
    assert isinstance(raised.value, TimeoutError)
    assert isinstance(raised.value.__cause__, httpx.ReadTimeout)


def _subclasses(cls: type) -> set[type]:
    found = set()
    for sub in cls.__subclasses__():
        found |= {sub, *_subclasses(sub)}
    return found


@pytest.mark.parametrize(
    "cls", sorted(_subclasses(httpx.RequestError) | {httpx.RequestError}, key=lambda c: c.__name__)
)
@pytest.mark.parametrize("submission", [False, True])
def test_every_httpx_request_error_is_mapped(cls: type, submission: bool) -> None:
    exc = cls("boom", request=httpx.Request("POST", "https://api.example.test/b/v1/verify"))
    mapped = from_httpx(exc, submission=submission)
    assert isinstance(mapped, ClientConnectionError)
    assert isinstance(mapped, ClientError)
    assert "POST https://api.example.test/b/v1/verify" in str(mapped)
