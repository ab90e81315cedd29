"""What the clients return besides verification results: jobs, batches, credits, webhooks.

Frozen dataclasses parsed from the forms' JSON with ``from_json``; fields a remote service adds
are ignored, fields the spec marks as present only in some states are ``None`` otherwise.
Timestamps become aware ``datetime`` objects. Verification results are the shared
:class:`~listhygiene.results.VerificationResult`.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Self

from listhygiene.results import VerificationResult
from listhygiene.vocabulary import TERMINAL_JOB_STATUSES, JobStatus

__all__ = [
    "TERMINAL_STATUSES",
    "BatchResult",
    "BulkJob",
    "FileJob",
    "FileJobAccepted",
    "FormACredits",
    "FormBCredits",
    "JobError",
    "JobStatus",
    "ResultsPage",
    "Webhook",
]


#: States a job does not leave: stop polling (listhygiene.vocabulary).
TERMINAL_STATUSES: frozenset[JobStatus] = TERMINAL_JOB_STATUSES


def _time(value: Any) -> datetime | None:
    if value in (None, ""):
        return None
    return datetime.fromisoformat(str(value))


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


@dataclass(frozen=True, slots=True)
class JobError:
    """Why a job failed."""

    code: str
    message: str

    @classmethod
    def from_json(cls, data: Any) -> "JobError | None":
        if not isinstance(data, Mapping):
            return None
        return cls(code=str(data.get("code", "")), message=str(data.get("message", "")))


# -- form A ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BatchResult:
    """``POST /verify/bulk`` of form A: one result per address, in input order."""

    results: tuple[VerificationResult, ...]
    total_emails: int
    valid_emails: int
    invalid_emails: int
    credits_used: int
    #: Unit not given by the spec; our service uses milliseconds.
    process_time: int

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        return cls(
            results=tuple(VerificationResult.from_form_a(item) for item in data["results"]),
            total_emails=int(data["total_emails"]),
            valid_emails=int(data["valid_emails"]),
            invalid_emails=int(data["invalid_emails"]),
            credits_used=int(data["credits_used"]),
            process_time=int(data.get("process_time") or 0),
        )


@dataclass(frozen=True, slots=True)
class FileJobAccepted:
    """``POST /verify/file``: the job was created (``task_id`` is its id)."""

    task_id: str
    status: JobStatus
    message: str
    file_name: str
    file_size: int
    estimated_count: int
    unique_emails: int
    total_rows: int
    email_column: str
    status_url: str
    created_at: datetime | None

    @property
    def job_id(self) -> str:
        return self.task_id

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        return cls(
            task_id=str(data["task_id"]),
            status=JobStatus(data["status"]),
            message=str(data.get("message", "")),
            file_name=str(data.get("file_name", "")),
            file_size=int(data.get("file_size", 0)),
            estimated_count=int(data.get("estimated_count", 0)),
            unique_emails=int(data.get("unique_emails", 0)),
            total_rows=int(data.get("total_rows", 0)),
            email_column=str(data.get("email_column", "")),
            status_url=str(data.get("status_url", "")),
            created_at=_time(data.get("created_at")),
        )


@dataclass(frozen=True, slots=True)
class FileJob:
    """``GET /verify/file/{job_id}``: counts so far; the completed shape fills the rest."""

    job_id: str
    status: JobStatus
    file_name: str
    total_emails: int
    processed_emails: int
    progress_percent: int
    valid_emails: int
    invalid_emails: int
    unknown_emails: int
    created_at: datetime | None
    role_emails: int | None = None
    catchall_emails: int | None = None
    disposable_emails: int | None = None
    credits_used: int | None = None
    process_time_seconds: float | None = None
    result_file_path: str | None = None
    download_url: str | None = None
    completed_at: datetime | None = None
    error: JobError | None = None

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        seconds = data.get("process_time_seconds")
        return cls(
            job_id=str(data["job_id"]),
            status=JobStatus(data["status"]),
            file_name=str(data.get("file_name", "")),
            total_emails=int(data.get("total_emails", 0)),
            processed_emails=int(data.get("processed_emails", 0)),
            progress_percent=int(data.get("progress_percent", 0)),
            valid_emails=int(data.get("valid_emails", 0)),
            invalid_emails=int(data.get("invalid_emails", 0)),
            unknown_emails=int(data.get("unknown_emails", 0)),
            created_at=_time(data.get("created_at")),
            role_emails=_opt_int(data.get("role_emails")),
            catchall_emails=_opt_int(data.get("catchall_emails")),
            disposable_emails=_opt_int(data.get("disposable_emails")),
            credits_used=_opt_int(data.get("credits_used")),
            process_time_seconds=None if seconds is None else float(seconds),
            result_file_path=data.get("result_file_path"),
            download_url=data.get("download_url"),
            completed_at=_time(data.get("completed_at")),
            error=JobError.from_json(data.get("error")),
        )


@dataclass(frozen=True, slots=True)
class FormACredits:
    """``GET /credits`` of form A."""

    account_id: str
    api_key_id: str
    api_key_name: str
    credits_balance: int
    credits_consumed: int
    credits_added: int
    last_updated: datetime | None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        return cls(
            account_id=str(data.get("account_id", "")),
            api_key_id=str(data.get("api_key_id", "")),
            api_key_name=str(data.get("api_key_name", "")),
            credits_balance=int(data["credits_balance"]),
            credits_consumed=int(data.get("credits_consumed", 0)),
            credits_added=int(data.get("credits_added", 0)),
            last_updated=_time(data.get("last_updated")),
        )


# -- both forms -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Webhook:
    """A registered webhook. ``secret`` only from form A's create; ``updated_at`` form A only."""

    id: str
    url: str
    events: tuple[str, ...]
    is_active: bool
    created_at: datetime | None
    secret: str | None = None
    updated_at: datetime | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        return cls(
            id=str(data["id"]),
            url=str(data["url"]),
            events=tuple(str(e) for e in data.get("events", ())),
            is_active=bool(data.get("is_active", True)),
            created_at=_time(data.get("created_at")),
            secret=data.get("secret"),
            updated_at=_time(data.get("updated_at")),
        )


# -- form B ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BulkJob:
    """A form B bulk job: the submission response, or a status response."""

    job_id: str
    status: JobStatus
    total: int
    processed: int
    valid: int
    invalid: int
    unknown: int
    created_at: datetime | None
    #: Not in the spec's table; our service reports it so that the counts add up.
    accept_all: int | None = None
    #: In status responses.
    progress_percent: int | None = None
    credits_used: int | None = None
    completed_at: datetime | None = None
    error: JobError | None = None

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        return cls(
            job_id=str(data["job_id"]),
            status=JobStatus(data["status"]),
            total=int(data.get("total", 0)),
            processed=int(data.get("processed", 0)),
            valid=int(data.get("valid", 0)),
            invalid=int(data.get("invalid", 0)),
            unknown=int(data.get("unknown", 0)),
            created_at=_time(data.get("created_at")),
            accept_all=_opt_int(data.get("accept_all")),
            progress_percent=_opt_int(data.get("progress_percent")),
            credits_used=_opt_int(data.get("credits_used")),
            completed_at=_time(data.get("completed_at")),
            error=JobError.from_json(data.get("error")),
        )


@dataclass(frozen=True, slots=True)
class ResultsPage:
    """One page of a bulk job's results; ``total`` counts the rows matching the filter."""

    job_id: str
    total: int
    limit: int
    offset: int
    results: tuple[VerificationResult, ...]

    @property
    def next_offset(self) -> int | None:
        """Where the next page starts, or ``None`` after the last one."""
        end = self.offset + len(self.results)
        return end if self.results and end < self.total else None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        return cls(
            job_id=str(data.get("job_id", "")),
            total=int(data["total"]),
            limit=int(data.get("limit", 0)),
            offset=int(data.get("offset", 0)),
            results=tuple(VerificationResult.from_form_b(item) for item in data["results"]),
        )


@dataclass(frozen=True, slots=True)
class FormBCredits:
    """``GET /credits`` of form B, with the key's hourly request window."""

    available: int
    used: int
    total: int
    plan: str
    resets_at: datetime | None
    requests_per_hour: int | None
    remaining: int | None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        found = data.get("rate_limit")
        rate: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        return cls(
            available=int(data["available"]),
            used=int(data.get("used", 0)),
            total=int(data.get("total", 0)),
            plan=str(data.get("plan", "")),
            resets_at=_time(data.get("resets_at")),
            requests_per_hour=_opt_int(rate.get("requests_per_hour")),
            remaining=_opt_int(rate.get("remaining")),
        )
