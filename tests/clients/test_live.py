"""The clients against our own service over real HTTP: uvicorn on loopback, a SQLite store, the
engine on the sandbox mail world. Sync and async, both forms."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from listhygiene import errors
from listhygiene.clients import (
    AsyncFormAClient,
    AsyncFormBClient,
    ClientRateLimitError,
    ClientSettings,
    FormAClient,
    FormBClient,
    JobStatus,
    read_results_csv,
)
from listhygiene.sandbox import Sandbox
from listhygiene.service.app import create_app
from listhygiene.service.store import Store
from listhygiene.statuses import FormBStatus, Reason, Status
from tests.service.live import LiveServer, engine_for

VALID = "alice.johnson@acme-corp.test"
NO_MAILBOX = "nobody.here@acme-corp.test"
CATCH_ALL = "nina.patel@fabrikam.test"
SERVFAIL = "claire.dupont@humongous-insurance.test"
HOOK = "https://127.0.0.1:9/hook"  # never delivered to in these tests


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    path: Path = tmp_path_factory.mktemp("clients") / "store.db"
    with Store(f"sqlite:///{path}") as opened:
        yield opened


@pytest.fixture(scope="module")
def root_url(sandbox: Sandbox, store: Store) -> Iterator[str]:
    app = create_app(store, engine_for(sandbox), allow_private_webhooks=True)
    with LiveServer(app) as url:
        yield url


def settings(root_url: str, form: str, key: str, **changes: Any) -> ClientSettings:
    return ClientSettings(
        base_url=f"{root_url}/{form}/v1", api_key=key, timeout=30, max_retries=1, **changes
    )


def new_key(store: Store, credits: int = 100, **kwargs: Any) -> str:
    key, _ = store.create_key("clients", credits, **kwargs)
    return key


# -- form A ---------------------------------------------------------------------------------------


def test_a_sync_verify_credits_webhooks(root_url: str, store: Store) -> None:
    key = new_key(store, 10)
    with FormAClient(settings(root_url, "a", key)) as client:
        single = client.verify_single(VALID)
        assert (single.email, single.status, single.credits_used) == (VALID, Status.VALID, 1)
        assert single.smtp_check is True
        assert single.domain == "acme-corp.test"

        batch = client.verify_bulk([VALID, NO_MAILBOX, "not-an-email"], check_smtp=True)
        assert [r.status for r in batch.results] == [Status.VALID, Status.INVALID, Status.INVALID]
        assert batch.results[1].reason is Reason.MAILBOX_NOT_FOUND
        assert batch.results[2].reason is Reason.INVALID_SYNTAX
        assert (batch.total_emails, batch.valid_emails, batch.invalid_emails) == (3, 1, 2)

        credits = client.credits()
        assert credits.credits_added == 10
        assert credits.credits_balance == 10 - 1 - batch.credits_used
        assert credits.api_key_name == "clients"

        hook = client.create_webhook(HOOK, ["file.completed"])
        assert hook.secret
        assert hook.events == ("file.completed",)
        listed = client.list_webhooks()
        assert [(w.id, w.secret) for w in listed] == [(hook.id, None)]
        client.delete_webhook(hook.id)
        assert client.list_webhooks() == ()
        with pytest.raises(errors.FormANotFound):
            client.delete_webhook(hook.id)


def test_a_errors_over_http(root_url: str, store: Store) -> None:
    with (
        FormAClient(settings(root_url, "a", "wrong-key")) as client,
        pytest.raises(errors.FormAInvalidApiKey) as raised,
    ):
        client.credits()
    assert (raised.value.status, raised.value.code) == (401, "4010")

    key = new_key(store, 0)
    with (
        FormAClient(settings(root_url, "a", key)) as client,
        pytest.raises(errors.FormAInsufficientCredits),
    ):
        client.verify_single(VALID)

    # Another service's header name: ours does not read it, so the key is missing.
    with (
        FormAClient(settings(root_url, "a", key, api_key_header="ACME-API-KEY")) as client,
        pytest.raises(errors.AuthenticationError),
    ):
        client.credits()


def test_a_server_rate_limit_is_honoured(root_url: str, store: Store) -> None:
    """The service's 429 comes with ``Retry-After``, which the client waits (here: records)."""
    key = new_key(store, 10, limits={"a_other_per_minute": 1})
    waits: list[float] = []
    with FormAClient(
        settings(root_url, "a", key, rate_limit=False, max_wait=120), sleep=waits.append
    ) as client:
        client.credits()
        with pytest.raises(errors.FormARateLimited) as raised:
            client.credits()
    assert raised.value.retry_after is not None
    assert 0 < raised.value.retry_after <= 60
    assert waits == [float(raised.value.retry_after)]  # one retry (max_retries=1), then raised


def test_a_file_job(root_url: str, store: Store, tmp_path: Path) -> None:
    key = new_key(store, 10)
    path = tmp_path / "contacts.csv"
    path.write_text(f"name,email\nAlice,{VALID}\nNobody,{NO_MAILBOX}\nAgain,{VALID}\n")
    with FormAClient(settings(root_url, "a", key)) as client:
        accepted = client.submit_file(path)
        assert accepted.status is JobStatus.PENDING
        assert (accepted.total_rows, accepted.unique_emails) == (3, 2)
        assert accepted.email_column == "email"
        job = client.wait_for_file_job(accepted.task_id, interval=0.1, timeout=60)
        assert job.status is JobStatus.COMPLETED, job
        assert (job.total_emails, job.valid_emails, job.invalid_emails) == (2, 1, 1)
        frame = read_results_csv(client.file_results(job.job_id))
        assert list(frame["name"]) == ["Alice", "Nobody", "Again"]
        assert list(frame["status"]) == ["valid", "invalid", "valid"]
        valid_only = read_results_csv(client.file_results(job.job_id, valid=True))
        assert list(valid_only["name"]) == ["Alice", "Again"]


async def test_a_async(root_url: str, store: Store) -> None:
    key = new_key(store, 10)
    async with AsyncFormAClient(settings(root_url, "a", key)) as client:
        single = await client.verify_single(VALID, check_smtp=False)
        assert (single.status, single.smtp_check, single.score) == (Status.VALID, False, 0.9)
        batch = await client.verify_bulk([CATCH_ALL, NO_MAILBOX])
        assert [r.status for r in batch.results] == [Status.CATCHALL, Status.INVALID]
        assert (await client.credits()).credits_balance == 10 - 1 - batch.credits_used
        hook = await client.create_webhook(HOOK, ["file.completed", "file.failed"])
        assert [w.id for w in await client.list_webhooks()] == [hook.id]
        await client.delete_webhook(hook.id)
        assert await client.list_webhooks() == ()


# -- form B ---------------------------------------------------------------------------------------

MIXED = [VALID, NO_MAILBOX, SERVFAIL, "not-an-email", CATCH_ALL, VALID]


def test_b_sync_verify_bulk_credits_webhooks(root_url: str, store: Store) -> None:
    key = new_key(store, 100)
    with FormBClient(settings(root_url, "b", key, plan="professional")) as client:
        result = client.verify(VALID, timeout=10_000)
        assert result.form_b_status() == (FormBStatus.VALID, None)
        assert result.status is Status.VALID
        with pytest.raises(errors.FormBInvalidEmail):
            client.verify("not-an-email")

        submitted = client.submit_bulk(MIXED)
        assert submitted.status is JobStatus.PROCESSING
        assert (submitted.total, submitted.processed) == (len(MIXED), 0)
        job = client.wait_for_bulk_job(submitted.job_id, interval=0.1, timeout=60)
        assert job.status is JobStatus.COMPLETED
        assert job.progress_percent == 100
        assert job.completed_at is not None

        first = client.bulk_results(job.job_id, limit=4)
        assert (first.total, first.limit, first.offset, len(first.results)) == (6, 4, 0, 4)
        assert first.next_offset == 4
        every = list(client.iter_bulk_results(job.job_id, page_size=4))
        assert [r.email for r in every] == [
            r.email for r in client.bulk_results(job.job_id).results
        ]
        assert [r.form_b_status()[0] for r in every] == [
            FormBStatus.VALID,
            FormBStatus.INVALID,
            FormBStatus.UNKNOWN,
            FormBStatus.INVALID,
            FormBStatus.ACCEPT_ALL,
            FormBStatus.VALID,
        ]
        invalid = list(client.iter_bulk_results(job.job_id, status="invalid", page_size=1))
        assert [r.email for r in invalid] == [NO_MAILBOX, "not-an-email"]

        with pytest.raises(errors.FormBJobNotFound):
            client.bulk_job("no-such-job")

        credits = client.credits()
        assert credits.plan == "professional"
        assert credits.total == 100
        assert credits.requests_per_hour == 10_000
        assert credits.remaining is not None

        hook = client.create_webhook(HOOK, ["bulk.completed"], "s3cret")
        assert (hook.url, hook.events, hook.secret) == (HOOK, ("bulk.completed",), None)
        assert [w.id for w in client.list_webhooks()] == [hook.id]
        client.delete_webhook(hook.id)
        assert client.list_webhooks() == ()
        with pytest.raises(errors.FormBNotFound):
            client.delete_webhook(hook.id)


def test_b_errors_over_http(root_url: str, store: Store) -> None:
    with (
        FormBClient(settings(root_url, "b", "wrong-key")) as client,
        pytest.raises(errors.FormBInvalidApiKey),
    ):
        client.credits()
    key = new_key(store, 0)
    with FormBClient(settings(root_url, "b", key)) as client:
        with pytest.raises(errors.FormBInsufficientCredits):
            client.submit_bulk([VALID])
        with pytest.raises(errors.FormBInsufficientCredits):
            client.verify(VALID)


def test_b_exhausted_window_stops_the_client(root_url: str, store: Store) -> None:
    """With the hour's requests used up, the headers say so: the client does not send more."""
    key = new_key(store, 10, limits={"b_per_hour": 2})
    # max_wait 0: never wait for the window, however close its end
    with FormBClient(settings(root_url, "b", key, max_wait=0)) as client:
        client.credits()
        client.credits()  # X-RateLimit-Remaining: 0 from here on
        with pytest.raises(ClientRateLimitError) as raised:
            client.credits()
    assert isinstance(raised.value, errors.RateLimitError)
    assert raised.value.retry_after is not None
    assert raised.value.retry_after >= 1


async def test_b_async(root_url: str, store: Store) -> None:
    key = new_key(store, 100)
    async with AsyncFormBClient(settings(root_url, "b", key)) as client:
        result = await client.verify(CATCH_ALL, smtp_check=True)
        assert result.form_b_status() == (FormBStatus.ACCEPT_ALL, None)
        assert result.status is Status.CATCHALL

        submitted = await client.submit_bulk([VALID, NO_MAILBOX, CATCH_ALL], smtp_check=True)
        job = await client.wait_for_bulk_job(submitted.job_id, interval=0.1, timeout=60)
        assert job.status is JobStatus.COMPLETED
        emails = [r.email async for r in client.iter_bulk_results(job.job_id, page_size=2)]
        assert emails == [VALID, NO_MAILBOX, CATCH_ALL]

        credits = await client.credits()
        assert credits.available == 100 - 1 - (job.credits_used or 0)

        hook = await client.create_webhook(HOOK, ["bulk.completed", "bulk.failed"], "s3cret")
        assert [w.id for w in await client.list_webhooks()] == [hook.id]
        await client.delete_webhook(hook.id)
        assert await client.list_webhooks() == ()


# -- a base URL that is not the form's root -------------------------------------------------------


@pytest.mark.parametrize(
    ("form", "path"), [("a", ""), ("a", "/v1"), ("a", "/b/v1"), ("b", ""), ("b", "/a/v1")]
)
def test_a_base_url_without_the_forms_root_says_what_is_wrong(
    root_url: str, store: Store, form: str, path: str
) -> None:
    """A base URL missing ``/a/v1`` (``/b/v1``), or naming the other form, is answered by a 404
    or a 401 in a body of the wrong shape: the error names the URL and what to check, instead
    of a bare ``FormAUnknownError: Error``."""
    key = new_key(store, 10)
    config = ClientSettings(base_url=f"{root_url}{path}", api_key=key, max_retries=0)
    client: Any = FormAClient(config) if form == "a" else FormBClient(config)
    with client, pytest.raises(errors.ServiceError) as raised:
        client.credits()
    message = str(raised.value)
    assert f"{root_url}{path}" in message
    assert f"not a form {form.upper()} answer" in message
    assert "is the base URL right?" in message
    assert f"/{form}/v1" in message
