"""Every form A endpoint, sync and async, on answers shaped as spec/form-a.md's tables."""

import json
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from listhygiene.clients import (
    BatchResult,
    FileJob,
    FileJobAccepted,
    FormACredits,
    JobStatus,
    Webhook,
    read_results_csv,
)
from listhygiene.results import VerificationResult
from listhygiene.statuses import Reason, Status
from tests.clients.fakes import KEY, Both, FakeService, FakeTime, make_client, recorded

A = recorded("form_a.json")
P = "/a/v1"


def body(service: FakeService) -> dict:
    return json.loads(service.requests[-1].content)


def test_verify_single(client_a: Both, service: FakeService) -> None:
    service.json("POST", f"{P}/verify/single", A["verify_single"])
    result = client_a.verify_single("john.doe@example.com", check_smtp=False)
    assert isinstance(result, VerificationResult)
    assert result.to_form_a() == A["verify_single"]["data"]
    request = service.requests[-1]
    assert request.headers["LISTHYGIENE-API-KEY"] == KEY
    assert "authorization" not in request.headers
    assert request.headers["content-type"] == "application/json"
    assert body(service) == {"email": "john.doe@example.com", "check_smtp": False}


def test_verify_bulk(client_a: Both, service: FakeService) -> None:
    service.json("POST", f"{P}/verify/bulk", A["verify_bulk"])
    emails = ["john.doe@example.com", "nobody@example.com", "anyone@catchall.example"]
    batch = client_a.verify_bulk(emails)
    assert isinstance(batch, BatchResult)
    assert body(service) == {"emails": emails, "check_smtp": True}
    assert [r.email for r in batch.results] == emails
    assert [r.status for r in batch.results] == [Status.VALID, Status.INVALID, Status.CATCHALL]
    assert batch.results[1].reason is Reason.MAILBOX_NOT_FOUND
    assert [r.to_form_a_batch_item() for r in batch.results] == A["verify_bulk"]["data"]["results"]
    assert (batch.total_emails, batch.valid_emails, batch.invalid_emails) == (3, 1, 1)
    assert (batch.credits_used, batch.process_time) == (3, 1250)


def test_verify_bulk_checks_the_limit_before_sending(client_a: Both, service: FakeService) -> None:
    with pytest.raises(ValueError, match="at most 50"):
        client_a.verify_bulk([f"user{i}@example.com" for i in range(51)])
    with pytest.raises(ValueError, match="empty"):
        client_a.verify_bulk([])
    with pytest.raises(TypeError):
        client_a.verify_bulk("one@example.com")
    assert service.requests == []


def test_submit_file_from_a_path(client_a: Both, service: FakeService, tmp_path: Path) -> None:
    service.json("POST", f"{P}/verify/file", A["file_accepted"])
    path = tmp_path / "contacts.csv"
    path.write_bytes(b"name,email\nJane,jane@example.com\n")
    accepted = client_a.submit_file(path, email_column="email")
    assert isinstance(accepted, FileJobAccepted)
    assert accepted.task_id == accepted.job_id == "job_7f3a9c"
    assert accepted.status is JobStatus.PENDING
    assert (accepted.total_rows, accepted.unique_emails, accepted.estimated_count) == (
        125,
        120,
        120,
    )
    assert accepted.status_url == "/a/v1/verify/file/job_7f3a9c"
    assert accepted.created_at == datetime(2025, 1, 15, 10, 30, tzinfo=UTC)
    request = service.requests[-1]
    assert request.headers["content-type"].startswith("multipart/form-data; boundary=")
    content = request.content
    assert b'name="file"; filename="contacts.csv"' in content
    assert b"Content-Type: text/csv" in content
    assert b"Jane,jane@example.com" in content
    assert b'name="email_column"\r\n\r\nemail' in content


def test_submit_file_from_bytes_and_file_objects(
    client_a: Both, service: FakeService, tmp_path: Path
) -> None:
    service.json("POST", f"{P}/verify/file", A["file_accepted"])
    client_a.submit_file(b"jane@example.com\n", file_name="list.txt")
    assert b'filename="list.txt"' in service.requests[-1].content
    assert b"email_column" not in service.requests[-1].content
    path = tmp_path / "book.xlsx"
    path.write_bytes(b"PK fake workbook")
    with path.open("rb") as handle:
        client_a.submit_file(handle)
    assert b'filename="book.xlsx"' in service.requests[-1].content
    with pytest.raises(ValueError, match="file_name"):
        client_a.submit_file(b"jane@example.com\n")


def test_file_job_in_progress_completed_and_failed(client_a: Both, service: FakeService) -> None:
    path = f"{P}/verify/file/job_7f3a9c"
    service.json("GET", path, A["file_job_processing"])
    job = client_a.file_job("job_7f3a9c")
    assert isinstance(job, FileJob)
    assert (job.status, job.progress_percent, job.is_terminal) == (JobStatus.PROCESSING, 50, False)
    assert job.completed_at is None
    assert job.credits_used is None
    assert job.download_url is None

    service.json("GET", path, A["file_job_completed"])
    job = client_a.file_job("job_7f3a9c")
    assert job.status is JobStatus.COMPLETED
    assert job.is_terminal
    assert (job.role_emails, job.catchall_emails, job.disposable_emails) == (4, 3, 3)
    assert (job.credits_used, job.process_time_seconds) == (115, 42.5)
    assert job.download_url == "/a/v1/verify/file/job_7f3a9c/results"
    assert job.result_file_path == "results/job_7f3a9c.csv"
    assert job.completed_at == datetime(2025, 1, 15, 10, 30, 42, tzinfo=UTC)

    service.json("GET", path, A["file_job_failed"])
    job = client_a.file_job("job_7f3a9c")
    assert job.status is JobStatus.FAILED
    assert job.is_terminal
    assert job.error is not None
    assert job.error.code == "1000"


def test_wait_for_file_job_polls_until_done(
    client_a: Both, service: FakeService, fake_time: FakeTime
) -> None:
    service.on(
        "GET",
        f"{P}/verify/file/job_7f3a9c",
        *(
            httpx.Response(200, json=A[name])
            for name in ("file_job_processing", "file_job_processing", "file_job_completed")
        ),
    )
    job = client_a.wait_for_file_job("job_7f3a9c", interval=5)
    assert job.status is JobStatus.COMPLETED
    assert fake_time.sleeps == [5, 5]
    service.json("GET", f"{P}/verify/file/job_7f3a9c", A["file_job_processing"])
    with pytest.raises(TimeoutError):
        client_a.wait_for_file_job("job_7f3a9c", interval=5, timeout=12)


def test_file_results_with_and_without_filters(client_a: Both, service: FakeService) -> None:
    csv = recorded("file_results.csv")
    path = f"{P}/verify/file/job_7f3a9c/results"
    service.on("GET", path, httpx.Response(200, content=csv))
    assert client_a.file_results("job_7f3a9c") == csv
    assert service.requests[-1].url.query == b""
    client_a.file_results("job_7f3a9c", valid=True, catchall=True, role=True, invalid=False)
    params = dict(service.requests[-1].url.params)
    assert params == {"valid": "true", "catchall": "true", "role": "true", "invalid": "false"}


def test_read_results_csv() -> None:
    frame = read_results_csv(recorded("file_results.csv"))
    assert list(frame["email"]) == ["jane@example.com", "nobody@example.com", "info@example.com"]
    assert list(frame["name"]) == ["Jane", "'=cmd", "Info desk"]  # escaped formula kept as text
    assert list(frame["score"]) == [0.95, 0.1, 0.6]
    assert list(frame["is_deliverable"]) == [True, False, True]
    assert list(frame["is_role"]) == [False, False, True]
    assert list(frame["reason"]) == [None, "mailbox_not_found", "role_account"]


def test_credits(client_a: Both, service: FakeService) -> None:
    service.json("GET", f"{P}/credits", A["credits"])
    credits = client_a.credits()
    assert credits == FormACredits(
        account_id="acc_123",
        api_key_id="key_456",
        api_key_name="Production",
        credits_balance=9500,
        credits_consumed=500,
        credits_added=10000,
        last_updated=datetime(2025, 1, 15, 10, 30, tzinfo=UTC),
    )


def test_webhooks(client_a: Both, service: FakeService) -> None:
    service.json("POST", f"{P}/webhooks", A["webhook_created"])
    service.json("GET", f"{P}/webhooks", A["webhooks"])
    service.json("DELETE", f"{P}/webhooks/wh_abc", A["webhook_deleted"])

    created = client_a.create_webhook(
        "https://hooks.example.com/listhygiene", ["file.completed", "file.failed"]
    )
    assert body(service) == {
        "url": "https://hooks.example.com/listhygiene",
        "events": ["file.completed", "file.failed"],
    }
    assert isinstance(created, Webhook)
    assert created.secret == "whsec_s3cr3t"
    assert created.events == ("file.completed", "file.failed")
    assert created.updated_at is not None

    listed = client_a.list_webhooks()
    assert [w.id for w in listed] == ["wh_abc"]
    assert listed[0].secret is None
    assert listed[0].is_active is True

    assert client_a.delete_webhook("wh_abc") is None
    assert service.requests[-1].method == "DELETE"


def test_ids_are_quoted_into_the_path(client_a: Both, service: FakeService) -> None:
    service.json("GET", f"{P}/verify/file/a/b", A["file_job_processing"])  # decoded
    client_a.file_job("a/b")
    assert service.requests[-1].url.raw_path == b"/a/v1/verify/file/a%2Fb"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_custom_key_header(mode: str, service: FakeService, fake_time: FakeTime) -> None:
    service.json("GET", f"{P}/credits", A["credits"])
    client = make_client("a", mode, service, fake_time, api_key_header="ACME-API-KEY")
    try:
        client.credits()
    finally:
        client.close()
    headers = service.requests[-1].headers
    assert headers["ACME-API-KEY"] == KEY
    assert "LISTHYGIENE-API-KEY" not in headers
