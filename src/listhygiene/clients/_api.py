"""The endpoints of both forms as :class:`Call` values: request shape, checks, answer parsing.

Arguments are checked here, before anything is sent, where the spec fixes a limit (50 addresses
per form A batch, 10,000 per form B job, form B's time-out and page size): a request that
cannot succeed should not spend a rate-limit slot.
"""

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from listhygiene.clients._core import Call, Kind
from listhygiene.clients._files import FileInput, upload_part
from listhygiene.clients.models import (
    BatchResult,
    BulkJob,
    FileJob,
    FileJobAccepted,
    FormACredits,
    FormBCredits,
    ResultsPage,
    Webhook,
)
from listhygiene.results import VerificationResult

__all__ = ["MAX_BULK_A", "MAX_BULK_B", "MAX_PAGE", "MAX_TIMEOUT_MS", "form_a", "form_b"]

T = TypeVar("T")

MAX_BULK_A = 50
MAX_BULK_B = 10_000
MAX_PAGE = 1_000
MAX_TIMEOUT_MS = 30_000


def _segment(value: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError("an id is a non-empty string")
    return quote(value, safe="")


def _emails(emails: Iterable[str], most: int) -> list[str]:
    if isinstance(emails, str):
        raise TypeError("emails is a list of addresses, not one string")
    listed = list(emails)
    if not listed:
        raise ValueError("emails must not be empty")
    if len(listed) > most:
        raise ValueError(f"at most {most} emails per call, got {len(listed)}")
    if not all(isinstance(e, str) for e in listed):
        raise TypeError("every email must be a string")
    return listed


def _json(parse: Callable[[Any], T]) -> Callable[[httpx.Response], T]:
    """Form B: the bare JSON object."""

    def read(response: httpx.Response) -> T:
        body = response.json()
        if not isinstance(body, Mapping):
            raise ValueError("the body is not a JSON object")
        return parse(body)

    return read


def _data(parse: Callable[[Any], T]) -> Callable[[httpx.Response], T]:
    """Form A: the ``data`` of a success envelope."""

    def read(response: httpx.Response) -> T:
        body = response.json()
        if not isinstance(body, Mapping) or body.get("success") is not True or "data" not in body:
            raise ValueError("the body is not form A's success envelope")
        return parse(body["data"])

    return read


def _nothing(_: httpx.Response) -> None:
    return None


def _webhooks(data: Mapping[str, Any]) -> tuple[Webhook, ...]:
    return tuple(Webhook.from_json(item) for item in data["webhooks"])


class form_a:  # a namespace of call builders, named as the form
    """Form A (spec/form-a.md): the envelope, endpoint types single / bulk / file / other."""

    @staticmethod
    def verify_single(email: str, *, check_smtp: bool = True) -> Call[VerificationResult]:
        return Call(
            method="POST",
            path="verify/single",
            kind=Kind.WRITE,
            bucket="single",
            json={"email": email, "check_smtp": check_smtp},
            parse=_data(VerificationResult.from_form_a),
        )

    @staticmethod
    def verify_bulk(emails: Iterable[str], *, check_smtp: bool = True) -> Call[BatchResult]:
        return Call(
            method="POST",
            path="verify/bulk",
            kind=Kind.WRITE,
            bucket="bulk",
            json={"emails": _emails(emails, MAX_BULK_A), "check_smtp": check_smtp},
            parse=_data(BatchResult.from_json),
        )

    @staticmethod
    def submit_file(
        file: FileInput, *, file_name: str | None = None, email_column: str | None = None
    ) -> Call[FileJobAccepted]:
        return Call(
            method="POST",
            path="verify/file",
            kind=Kind.SUBMIT,
            bucket="file",
            files={"file": upload_part(file, file_name)},
            data={"email_column": email_column} if email_column else None,
            parse=_data(FileJobAccepted.from_json),
        )

    @staticmethod
    def file_job(job_id: str) -> Call[FileJob]:
        return Call(
            method="GET",
            path=f"verify/file/{_segment(job_id)}",
            kind=Kind.READ,
            bucket="file",
            parse=_data(FileJob.from_json),
        )

    @staticmethod
    def file_results(job_id: str, filters: Mapping[str, bool | None]) -> Call[bytes]:
        params = {k: "true" if v else "false" for k, v in filters.items() if v is not None}
        return Call(
            method="GET",
            path=f"verify/file/{_segment(job_id)}/results",
            kind=Kind.READ,
            bucket="file",
            params=params or None,
            parse=lambda response: response.content,
        )

    @staticmethod
    def credits() -> Call[FormACredits]:
        return Call(
            method="GET",
            path="credits",
            kind=Kind.READ,
            bucket="other",
            parse=_data(FormACredits.from_json),
        )

    @staticmethod
    def create_webhook(url: str, events: Iterable[str]) -> Call[Webhook]:
        return Call(
            method="POST",
            path="webhooks",
            kind=Kind.WRITE,
            bucket="other",
            json={"url": url, "events": _events(events)},
            parse=_data(Webhook.from_json),
        )

    @staticmethod
    def list_webhooks() -> Call[tuple[Webhook, ...]]:
        return Call(
            method="GET", path="webhooks", kind=Kind.READ, bucket="other", parse=_data(_webhooks)
        )

    @staticmethod
    def delete_webhook(webhook_id: str) -> Call[None]:
        return Call(
            method="DELETE",
            path=f"webhooks/{_segment(webhook_id)}",
            kind=Kind.DELETE,
            bucket="other",
            parse=_nothing,
        )


class form_b:  # a namespace of call builders, named as the form
    """Form B (spec/form-b.md): bare JSON, one rate-limit bucket per key."""

    @staticmethod
    def verify(
        email: str, *, smtp_check: bool = True, timeout: int | None = None
    ) -> Call[VerificationResult]:
        body: dict[str, Any] = {"email": email, "smtp_check": smtp_check}
        if timeout is not None:
            if isinstance(timeout, bool) or not 1 <= int(timeout) <= MAX_TIMEOUT_MS:
                raise ValueError(f"timeout is 1 to {MAX_TIMEOUT_MS} milliseconds")
            body["timeout"] = int(timeout)
        return Call(
            method="POST",
            path="verify",
            kind=Kind.WRITE,
            bucket="b",
            json=body,
            parse=_json(VerificationResult.from_form_b),
            # the service may take its whole time-out: wait for it, and for the answer
            min_timeout=(timeout or 5_000) / 1000 + 10,
        )

    @staticmethod
    def submit_bulk(
        emails: Iterable[str], *, smtp_check: bool = True, webhook_url: str | None = None
    ) -> Call[BulkJob]:
        body: dict[str, Any] = {"emails": _emails(emails, MAX_BULK_B), "smtp_check": smtp_check}
        if webhook_url is not None:
            body["webhook_url"] = webhook_url
        return Call(
            method="POST",
            path="verify/bulk",
            kind=Kind.SUBMIT,
            bucket="b",
            json=body,
            parse=_json(BulkJob.from_json),
        )

    @staticmethod
    def bulk_job(job_id: str) -> Call[BulkJob]:
        return Call(
            method="GET",
            path=f"verify/bulk/{_segment(job_id)}",
            kind=Kind.READ,
            bucket="b",
            parse=_json(BulkJob.from_json),
        )

    @staticmethod
    def cancel_bulk_job(job_id: str) -> Call[None]:
        """``DELETE /verify/bulk/{job_id}``: not in form B's spec, offered by some services
        (docs/airflow.md, "Cancelling"); a service without it answers 404 or 405."""
        return Call(
            method="DELETE",
            path=f"verify/bulk/{_segment(job_id)}",
            kind=Kind.DELETE,
            bucket="b",
            parse=_nothing,
        )

    @staticmethod
    def bulk_results(
        job_id: str, *, status: str | None = None, limit: int = 100, offset: int = 0
    ) -> Call[ResultsPage]:
        if not 1 <= limit <= MAX_PAGE:
            raise ValueError(f"limit is 1 to {MAX_PAGE}")
        if offset < 0:
            raise ValueError("offset must not be negative")
        params: dict[str, Any] = {"limit": limit, "offset": offset}
        if status is not None:
            params["status"] = str(status)
        return Call(
            method="GET",
            path=f"verify/bulk/{_segment(job_id)}/results",
            kind=Kind.READ,
            bucket="b",
            params=params,
            parse=_json(ResultsPage.from_json),
        )

    @staticmethod
    def credits() -> Call[FormBCredits]:
        return Call(
            method="GET",
            path="credits",
            kind=Kind.READ,
            bucket="b",
            parse=_json(FormBCredits.from_json),
        )

    @staticmethod
    def create_webhook(url: str, events: Iterable[str], secret: str) -> Call[Webhook]:
        return Call(
            method="POST",
            path="webhooks",
            kind=Kind.WRITE,
            bucket="b",
            json={"url": url, "events": _events(events), "secret": secret},
            parse=_json(Webhook.from_json),
        )

    @staticmethod
    def list_webhooks() -> Call[tuple[Webhook, ...]]:
        return Call(
            method="GET", path="webhooks", kind=Kind.READ, bucket="b", parse=_json(_webhooks)
        )

    @staticmethod
    def delete_webhook(webhook_id: str) -> Call[None]:
        return Call(
            method="DELETE",
            path=f"webhooks/{_segment(webhook_id)}",
            kind=Kind.DELETE,
            bucket="b",
            parse=_nothing,
        )


def _events(events: Iterable[str]) -> list[str]:
    if isinstance(events, str):
        raise TypeError("events is a list of event names, not one string")
    return list(events)
