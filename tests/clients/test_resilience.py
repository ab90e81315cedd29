"""Retries, back-off and rate limits, sync and async, with fake time (nothing really waits)."""

import time
from collections.abc import Iterator

import httpx
import pytest

from listhygiene import errors
from listhygiene.clients import (
    ClientConnectionError,
    ClientRateLimitError,
    SubmissionUncertainError,
)
from listhygiene.clients._limits import SlidingWindow
from tests.clients.fakes import Both, FakeService, FakeTime, make_client, recorded

A = recorded("form_a.json")
B = recorded("form_b.json")


def a_error(status: int, code: str, **headers: str) -> httpx.Response:
    body = {"success": False, "code": code, "message": "x", "error": {"code": code, "message": "x"}}
    return httpx.Response(status, json=body, headers=headers)


def b_error(
    status: int, code: str, headers: dict[str, str] | None = None, **extra: int
) -> httpx.Response:
    return httpx.Response(
        status, json={"error": {"code": code, "message": "x", **extra}}, headers=headers or {}
    )


def ok(body: dict) -> httpx.Response:
    return httpx.Response(200, json=body)


@pytest.fixture
def client(
    mode: str, service: FakeService, fake_time: FakeTime, request: pytest.FixtureRequest
) -> Iterator[Both]:
    form, options = request.param
    made = make_client(form, mode, service, fake_time, **options)
    yield made
    made.close()


def with_(form: str, **options: object) -> pytest.MarkDecorator:
    return pytest.mark.parametrize("client", [(form, options)], indirect=True, ids=[form])


# -- 429 ------------------------------------------------------------------------------------------


@with_("a")
def test_a_429_waits_retry_after_then_retries(
    client: Both, service: FakeService, fake_time: FakeTime
) -> None:
    service.on(
        "POST",
        "/a/v1/verify/single",
        a_error(429, "4290", **{"Retry-After": "2"}),
        ok(A["verify_single"]),
    )
    assert client.verify_single("john.doe@example.com").email == "john.doe@example.com"
    assert fake_time.sleeps == [2.0]
    assert len(service.requests) == 2


@with_("a")
def test_a_429_on_a_submission_is_retried_too(
    client: Both, service: FakeService, fake_time: FakeTime
) -> None:
    """A 429 is a refusal: the job was not created, so sending again is safe."""
    service.on(
        "POST",
        "/a/v1/verify/file",
        a_error(429, "4290", **{"Retry-After": "1"}),
        ok(A["file_accepted"]),
    )
    assert client.submit_file(b"x@example.com\n", file_name="l.txt").task_id == "job_7f3a9c"
    assert fake_time.sleeps == [1.0]


@with_("b")
def test_b_429_waits_retry_after_of_the_body(
    client: Both, service: FakeService, fake_time: FakeTime
) -> None:
    service.on(
        "GET", "/b/v1/credits", b_error(429, "RATE_LIMIT_EXCEEDED", retry_after=3), ok(B["credits"])
    )
    assert client.credits().available == 9500
    assert fake_time.sleeps == [3.0]


@with_("b")
def test_b_429_without_retry_after_waits_for_the_reset(
    client: Both, service: FakeService, fake_time: FakeTime
) -> None:
    reset = {"X-RateLimit-Remaining": "5", "X-RateLimit-Reset": str(int(time.time()) + 5)}
    service.on("GET", "/b/v1/credits", b_error(429, "RATE_LIMIT_EXCEEDED", reset), ok(B["credits"]))
    client.credits()
    (wait,) = fake_time.sleeps
    assert 0 < wait <= 5


@with_("b")
def test_b_429_longer_than_max_wait_raises_at_once(
    client: Both, service: FakeService, fake_time: FakeTime
) -> None:
    service.on("POST", "/b/v1/verify", b_error(429, "RATE_LIMIT_EXCEEDED", retry_after=3600))
    with pytest.raises(errors.FormBRateLimitExceeded) as raised:
        client.verify("x@example.com")
    assert raised.value.retry_after == 3600
    assert fake_time.sleeps == []
    assert len(service.requests) == 1


@with_("a", max_retries=2)
def test_429_retries_are_bounded(client: Both, service: FakeService, fake_time: FakeTime) -> None:
    service.on("GET", "/a/v1/credits", a_error(429, "4290", **{"Retry-After": "1"}))
    with pytest.raises(errors.FormARateLimited):
        client.credits()
    assert len(service.requests) == 3
    assert fake_time.sleeps == [1.0, 1.0]


# -- 5xx and network errors -----------------------------------------------------------------------


@with_("a")
def test_get_backs_off_on_5xx(client: Both, service: FakeService, fake_time: FakeTime) -> None:
    service.on(
        "GET",
        "/a/v1/credits",
        a_error(500, "1000"),
        httpx.Response(503, text="busy"),
        ok(A["credits"]),
    )
    assert client.credits().credits_balance == 9500
    # jitter pinned to its top: backoff_base * 2 ** attempt
    assert fake_time.sleeps == [0.5, 1.0]


@with_("b", backoff_max=1.5)
def test_back_off_is_capped_and_bounded(
    client: Both, service: FakeService, fake_time: FakeTime
) -> None:
    service.on("GET", "/b/v1/verify/bulk/j1", b_error(500, "INTERNAL_ERROR"))
    with pytest.raises(errors.FormBInternalError):
        client.bulk_job("j1")
    assert fake_time.sleeps == [0.5, 1.0, 1.5]
    assert len(service.requests) == 4


@with_("b")
def test_503_retry_after_wins_over_back_off(
    client: Both, service: FakeService, fake_time: FakeTime
) -> None:
    service.on(
        "GET",
        "/b/v1/webhooks",
        b_error(503, "SERVICE_UNAVAILABLE", {"Retry-After": "4"}),
        ok(B["webhooks"]),
    )
    client.list_webhooks()
    assert fake_time.sleeps == [4.0]


@with_("b")
def test_get_retries_network_errors(
    client: Both, service: FakeService, fake_time: FakeTime
) -> None:
    service.on(
        "GET",
        "/b/v1/verify/bulk/j1",
        httpx.ReadTimeout("slow"),
        httpx.RemoteProtocolError("disconnected"),
        ok(B["bulk_completed"]),
    )
    assert client.bulk_job("j1").is_terminal
    assert len(service.requests) == 3


@with_("a")
def test_verification_is_not_repeated_on_5xx(
    client: Both, service: FakeService, fake_time: FakeTime
) -> None:
    service.on("POST", "/a/v1/verify/bulk", a_error(500, "1000"), ok(A["verify_bulk"]))
    with pytest.raises(errors.FormAInternalError):
        client.verify_bulk(["x@example.com"])
    assert len(service.requests) == 1


@with_("b")
def test_verification_is_not_repeated_after_a_read_error(
    client: Both, service: FakeService
) -> None:
    service.on("POST", "/b/v1/verify", httpx.ReadError("reset"), ok(B["verify"]))
    with pytest.raises(ClientConnectionError) as raised:
        client.verify("x@example.com")
    assert not isinstance(raised.value, SubmissionUncertainError)
    assert len(service.requests) == 1


@with_("b")
def test_verification_is_repeated_when_it_never_left(
    client: Both, service: FakeService, fake_time: FakeTime
) -> None:
    service.on("POST", "/b/v1/verify", httpx.ConnectError("refused"), ok(B["verify"]))
    assert client.verify("john.doe@example.com").email == "john.doe@example.com"
    assert len(service.requests) == 2
    assert fake_time.sleeps == [0.5]


@with_("b")
def test_submission_is_not_repeated_on_5xx(client: Both, service: FakeService) -> None:
    service.on("POST", "/b/v1/verify/bulk", b_error(500, "INTERNAL_ERROR"), ok(B["bulk_submitted"]))
    with pytest.raises(errors.FormBInternalError):
        client.submit_bulk(["x@example.com"])
    assert len(service.requests) == 1


@with_("b")
@pytest.mark.parametrize(
    "lost",
    [httpx.ReadTimeout("slow"), httpx.ReadError("reset"), httpx.RemoteProtocolError("closed")],
    ids=lambda e: type(e).__name__,
)
def test_submission_with_a_lost_answer_may_exist(
    client: Both, service: FakeService, lost: Exception
) -> None:
    service.on("POST", "/b/v1/verify/bulk", lost, ok(B["bulk_submitted"]))
    with pytest.raises(SubmissionUncertainError, match="may have been created") as raised:
        client.submit_bulk(["x@example.com"])
    assert raised.value.__cause__ is lost
    assert len(service.requests) == 1


@with_("a")
def test_file_submission_with_a_lost_answer_may_exist(client: Both, service: FakeService) -> None:
    service.on("POST", "/a/v1/verify/file", httpx.WriteTimeout("stuck"))
    with pytest.raises(SubmissionUncertainError):
        client.submit_file(b"x@example.com\n", file_name="l.txt")
    assert len(service.requests) == 1


@with_("a")
def test_submission_is_repeated_when_it_never_left(
    client: Both, service: FakeService, fake_time: FakeTime
) -> None:
    service.on(
        "POST", "/a/v1/verify/file", httpx.ConnectTimeout("no route"), ok(A["file_accepted"])
    )
    assert client.submit_file(b"x@example.com\n", file_name="l.txt").task_id == "job_7f3a9c"
    sent = service.sent("POST", "/a/v1/verify/file")
    assert len(sent) == 2
    for request in sent:  # the same file each time, though read once
        assert b'filename="l.txt"' in request.content
        assert b"x@example.com\n" in request.content


@with_("b")
def test_delete_whose_first_answer_was_lost_is_done(client: Both, service: FakeService) -> None:
    service.on(
        "DELETE",
        "/b/v1/webhooks/wh_1",
        httpx.ReadTimeout("slow"),
        b_error(404, "NOT_FOUND"),
    )
    assert client.delete_webhook("wh_1") is None
    assert len(service.requests) == 2


# -- client-side limits ---------------------------------------------------------------------------


@with_("a", form_a_limits={"single": 2, "bulk": 1, "file": 1, "other": 1}, max_wait=120)
def test_a_limiter_keeps_each_endpoint_type_under_its_limit(
    client: Both, service: FakeService, fake_time: FakeTime
) -> None:
    service.json("POST", "/a/v1/verify/single", A["verify_single"])
    service.json("GET", "/a/v1/credits", A["credits"])
    client.verify_single("a@example.com")
    client.verify_single("b@example.com")
    client.credits()  # another type: its own window
    assert fake_time.sleeps == []
    client.verify_single("c@example.com")
    assert fake_time.sleeps == [60.0]


@with_("a", form_a_limits={"single": 1, "bulk": 1, "file": 1, "other": 1}, max_wait=30)
def test_a_limiter_wait_over_max_wait_raises_without_sending(
    client: Both, service: FakeService, fake_time: FakeTime
) -> None:
    service.json("GET", "/a/v1/credits", A["credits"])
    client.credits()
    with pytest.raises(ClientRateLimitError) as raised:
        client.credits()
    assert isinstance(raised.value, errors.RateLimitError)
    assert raised.value.retry_after == 60
    assert len(service.requests) == 1


@with_("b", requests_per_hour=2, max_wait=4000)
def test_b_limiter_keeps_under_the_hourly_limit(
    client: Both, service: FakeService, fake_time: FakeTime
) -> None:
    service.json("GET", "/b/v1/credits", B["credits"])
    for _ in range(3):
        client.credits()
    assert fake_time.sleeps == [3600.0]


@with_("b", plan="free")
def test_b_plan_gives_the_limit(client: Both, service: FakeService, fake_time: FakeTime) -> None:
    service.json("GET", "/b/v1/credits", B["credits"])
    for _ in range(100):
        client.credits()
    with pytest.raises(ClientRateLimitError):
        client.credits()
    assert len(service.requests) == 100


@with_("b")
def test_b_exhausted_window_pauses_until_reset(
    client: Both, service: FakeService, fake_time: FakeTime
) -> None:
    headers = {
        "X-RateLimit-Limit": "100",
        "X-RateLimit-Remaining": "0",
        "X-RateLimit-Reset": str(int(time.time()) + 30),
    }
    service.on("GET", "/b/v1/credits", httpx.Response(200, json=B["credits"], headers=headers))
    client.credits()
    assert fake_time.sleeps == []
    client.credits()
    (wait,) = fake_time.sleeps
    assert 25 < wait <= 30


@with_("b", rate_limit=False, requests_per_hour=1)
def test_limiter_can_be_turned_off(client: Both, service: FakeService, fake_time: FakeTime) -> None:
    service.json("GET", "/b/v1/credits", B["credits"])
    for _ in range(3):
        client.credits()
    assert fake_time.sleeps == []


def test_sliding_window_allows_at_most_the_limit_in_any_span() -> None:
    window = SlidingWindow(3, 60)
    now, sent = 0.0, []
    for _ in range(10):
        while (wait := window.wait(now)) > 0:
            now += wait
        window.record(now)
        sent.append(now)
        now += 7
    for start in sent:
        assert sum(start <= t < start + 60 for t in sent) <= 3
