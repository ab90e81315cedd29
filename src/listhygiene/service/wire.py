"""The forms' wire shapes that more than one part of the service builds: form A's success
envelope, timestamps, a file job's paths and its event data, a bulk job's event data.

The store returns records (``store/jobs.py``: :class:`StoredJob`); turning them into what a client
or a webhook receiver reads happens here and in the routers, never in the store (issue 16: a
service without import circles).
"""

from datetime import UTC, datetime
from typing import Any

from listhygiene.service import FORM_A_ROOT
from listhygiene.service.store.jobs import StoredJob

__all__ = [
    "bulk_event_data",
    "file_event_data",
    "file_paths",
    "iso",
    "process_seconds",
    "success",
]


def success(data: Any) -> dict[str, Any]:
    """Form A's success envelope."""
    return {"success": True, "code": "0", "message": "Success", "data": data}


def iso(moment: datetime) -> str:
    """ISO 8601 UTC with a ``Z``."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def file_paths(job_id: str) -> tuple[str, str]:
    """A file job's ``(status_url, download_url)``: paths from the server root (PRODUCT.md)."""
    status_url = f"{FORM_A_ROOT}/verify/file/{job_id}"
    return status_url, f"{status_url}/results"


def process_seconds(job: StoredJob) -> float:
    """Seconds from the job's first claim to its end (0 before it started)."""
    if job.started_at is None or job.completed_at is None:
        return 0.0
    return round(max(0.0, (job.completed_at - job.started_at).total_seconds()), 3)


def file_event_data(job: StoredJob) -> dict[str, Any]:
    """The ``data`` of a ``file.completed`` / ``file.failed`` event (spec/form-a.md, Events)."""
    _, download_url = file_paths(job.id)
    completed = job.status == "completed"
    return {
        "job_id": job.id,
        "file_name": job.file_name or "",
        "total_emails": job.unique,
        "valid_emails": job.valid,
        "invalid_emails": job.invalid,
        "role_emails": job.role,
        "catchall_emails": job.catchall,
        "unknown_emails": job.unknown,
        "disposable_emails": job.disposable,
        "credits_used": job.credits_used,
        "process_time_seconds": process_seconds(job),
        # The service keeps no result file of its own: it is rendered from the store on request.
        "result_file_path": download_url if completed else "",
        "download_url": download_url if completed else "",
    }


def bulk_event_data(job: StoredJob) -> dict[str, Any]:
    """The ``data`` of a ``bulk.completed`` / ``bulk.failed`` event (spec/form-b.md)."""
    return {
        "job_id": job.id,
        "status": job.status,
        "total": job.total,
        "valid": job.valid,
        "invalid": job.invalid,
        "unknown": job.unknown,
    }
