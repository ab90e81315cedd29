"""Every form B endpoint, sync and async, on answers shaped as spec/form-b.md's tables."""

import json
from datetime import UTC, datetime

import httpx
import pytest

from listhygiene.clients import BulkJob, FormBCredits, JobStatus, ResultsPage
from listhygiene.results import VerificationResult
from listhygiene.statuses import FormBStatus, Reason, Status
from tests.clients.fakes import KEY, Both, FakeService, FakeTime, recorded

B = recorded("form_b.json")
P = "/b/v1"


def body(service: FakeService) -> dict:
    return json.loads(service.requests[-1].content)


def test_verify(client_b: Both, service: FakeService) -> None:
    service.json("POST", f"{P}/verify", B["verify"])
    result = client_b.verify("john.doe@example.com")
    assert isinstance(result, VerificationResult)
    assert result.status is Status.VALID
    assert result.to_form_b() == B["verify"]
    request = service.requests[-1]
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert "LISTHYGIENE-API-KEY" not in request.headers
    assert body(service) == {"email": "john.doe@example.com", "smtp_check": True}


def test_verify_with_timeout_and_no_smtp(client_b: Both, service: FakeService) -> None:
    service.json("POST", f"{P}/verify", B["verify_accept_all"])
    result = client_b.verify("anyone@catchall.example", smtp_check=False, timeout=20_000)
    assert body(service) == {
        "email": "anyone@catchall.example",
        "smtp_check": False,
        "timeout": 20_000,
    }
    # the read time-out leaves room for the service's own
    assert service.requests[-1].extensions["timeout"]["read"] >= 60
    assert result.status is Status.CATCHALL
    assert result.form_b_status() == (FormBStatus.ACCEPT_ALL, None)


@pytest.mark.parametrize("timeout", [0, 30_001, -5])
def test_verify_timeout_range_checked_before_sending(
    client_b: Both, service: FakeService, timeout: int
) -> None:
    with pytest.raises(ValueError, match="30000"):
        client_b.verify("john.doe@example.com", timeout=timeout)
    assert service.requests == []


def test_submit_bulk(client_b: Both, service: FakeService) -> None:
    service.json("POST", f"{P}/verify/bulk", B["bulk_submitted"])
    emails = ["john.doe@example.com", "info@example.com", "nobody@example.com"]
    job = client_b.submit_bulk(
        emails, smtp_check=False, webhook_url="https://hooks.example.com/bulk"
    )
    assert body(service) == {
        "emails": emails,
        "smtp_check": False,
        "webhook_url": "https://hooks.example.com/bulk",
    }
    assert isinstance(job, BulkJob)
    assert job.job_id == "bulk_9d2e"
    assert job.status is JobStatus.PROCESSING
    assert (job.total, job.processed, job.valid, job.invalid, job.unknown) == (3, 0, 0, 0, 0)
    assert job.credits_used == 3
    assert job.progress_percent is None
    assert job.created_at == datetime(2025, 1, 15, 10, 30, tzinfo=UTC)


def test_submit_bulk_checks_the_limit_before_sending(client_b: Both, service: FakeService) -> None:
    with pytest.raises(ValueError, match="10000"):
        client_b.submit_bulk([f"u{i}@example.com" for i in range(10_001)])
    with pytest.raises(ValueError, match="empty"):
        client_b.submit_bulk([])
    assert service.requests == []


def test_bulk_job_in_progress_and_completed(client_b: Both, service: FakeService) -> None:
    service.json("GET", f"{P}/verify/bulk/bulk_9d2e", B["bulk_processing"])
    job = client_b.bulk_job("bulk_9d2e")
    assert (job.status, job.progress_percent, job.processed) == (JobStatus.PROCESSING, 33, 1)
    assert not job.is_terminal
    assert job.completed_at is None
    service.json("GET", f"{P}/verify/bulk/bulk_9d2e", B["bulk_completed"])
    job = client_b.bulk_job("bulk_9d2e")
    assert job.is_terminal
    assert job.completed_at == datetime(2025, 1, 15, 10, 31, tzinfo=UTC)
    assert (job.valid, job.invalid, job.unknown) == (2, 1, 0)


def test_wait_for_bulk_job(client_b: Both, service: FakeService, fake_time: FakeTime) -> None:
    service.on(
        "GET",
        f"{P}/verify/bulk/bulk_9d2e",
        httpx.Response(200, json=B["bulk_processing"]),
        httpx.Response(200, json=B["bulk_completed"]),
    )
    assert client_b.wait_for_bulk_job("bulk_9d2e", interval=3).status is JobStatus.COMPLETED
    assert fake_time.sleeps == [3]


def test_bulk_results_page(client_b: Both, service: FakeService) -> None:
    service.json("GET", f"{P}/verify/bulk/bulk_9d2e/results", B["results_page_2"])
    page = client_b.bulk_results("bulk_9d2e", status="invalid", limit=2, offset=2)
    assert dict(service.requests[-1].url.params) == {
        "limit": "2",
        "offset": "2",
        "status": "invalid",
    }
    assert isinstance(page, ResultsPage)
    assert (page.job_id, page.total, page.limit, page.offset) == ("bulk_9d2e", 3, 2, 2)
    assert page.next_offset is None
    (result,) = page.results
    assert result.email == "nobody@example.com"
    # the sample item's reason sits in ``result``
    assert result.form_b_status() == (FormBStatus.INVALID, Reason.MAILBOX_NOT_FOUND)
    assert result.status is Status.INVALID
    assert result.reason is Reason.MAILBOX_NOT_FOUND


@pytest.mark.parametrize(("limit", "offset"), [(0, 0), (1001, 0), (10, -1)])
def test_bulk_results_paging_checked(
    client_b: Both, service: FakeService, limit: int, offset: int
) -> None:
    with pytest.raises(ValueError, match=r"limit|offset"):
        client_b.bulk_results("bulk_9d2e", limit=limit, offset=offset)
    assert service.requests == []


def test_iter_bulk_results_reads_every_page(client_b: Both, service: FakeService) -> None:
    service.on(
        "GET",
        f"{P}/verify/bulk/bulk_9d2e/results",
        httpx.Response(200, json=B["results_page_1"]),
        httpx.Response(200, json=B["results_page_2"]),
    )
    results = list(client_b.iter_bulk_results("bulk_9d2e", page_size=2))
    assert [r.email for r in results] == [
        "john.doe@example.com",
        "info@example.com",
        "nobody@example.com",
    ]
    assert [dict(r.url.params) for r in service.requests] == [
        {"limit": "2", "offset": "0"},
        {"limit": "2", "offset": "2"},
    ]
    # role is a flag in form B; in form A's classification it is the status
    assert results[1].form_b_status() == (FormBStatus.VALID, None)
    assert results[1].status is Status.ROLE


def test_credits(client_b: Both, service: FakeService) -> None:
    service.json("GET", f"{P}/credits", B["credits"])
    assert client_b.credits() == FormBCredits(
        available=9500,
        used=500,
        total=10000,
        plan="professional",
        resets_at=datetime(2025, 2, 1, tzinfo=UTC),
        requests_per_hour=10000,
        remaining=9876,
    )


def test_webhooks(client_b: Both, service: FakeService) -> None:
    service.json("POST", f"{P}/webhooks", B["webhook_created"])
    service.json("GET", f"{P}/webhooks", B["webhooks"])
    service.json("DELETE", f"{P}/webhooks/wh_b_1", B["webhook_deleted"])
    created = client_b.create_webhook(
        "https://hooks.example.com/bulk", ["bulk.completed", "bulk.failed"], "my-secret"
    )
    assert body(service) == {
        "url": "https://hooks.example.com/bulk",
        "events": ["bulk.completed", "bulk.failed"],
        "secret": "my-secret",
    }
    assert (created.id, created.is_active, created.secret) == ("wh_b_1", True, None)
    assert [w.id for w in client_b.list_webhooks()] == ["wh_b_1"]
    assert client_b.delete_webhook("wh_b_1") is None
    assert service.requests[-1].method == "DELETE"
