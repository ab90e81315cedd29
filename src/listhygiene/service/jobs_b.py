"""Form B bulk jobs: submit a list, follow the job, read its results in pages.

- ``POST /verify/bulk``: ``emails`` (1 to 10,000 strings), ``smtp_check`` (default true),
  ``webhook_url`` (stored; delivered by the webhooks part). One credit per distinct address is
  reserved at once (403 ``INSUFFICIENT_CREDITS`` otherwise); the job starts ``processing``.
  Syntactically invalid addresses are verified like the rest: results with status invalid.
- ``GET /verify/bulk/{job_id}``: the job with ``progress_percent``; completed adds
  ``completed_at``, failed adds ``error: {code, message}``. ``credits_used`` is what is reserved
  until the job is settled, then what was kept (unknown results are refunded).
- ``GET /verify/bulk/{job_id}/results``: ``limit`` 1 to 1000 (default 100), ``offset`` ≥ 0,
  ``status`` one of valid, invalid, unknown (and ``accept_all``, form B's fourth status); one
  item per submitted address, duplicates included, in submission order. A job that has not
  completed: 400 ``INVALID_REQUEST``.

Counts (``processed``, ``valid``, ``invalid``, ``unknown``, and ``accept_all``, which the spec's
table lacks but without which the counts would not add up) count submitted addresses.
Another key's job is 404 ``JOB_NOT_FOUND``, like an unknown one.
"""

from typing import Annotated, Any, ClassVar

from fastapi import Depends, FastAPI, Query, Request
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr
from starlette.concurrency import run_in_threadpool

from listhygiene.errors import FormBInsufficientCredits, FormBInvalidRequest, FormBJobNotFound
from listhygiene.results import VerificationResult
from listhygiene.service.auth import FormBKey, form_b_key
from listhygiene.service.delivery import MAX_URL_LENGTH, guard_url
from listhygiene.service.request_body import read_body
from listhygiene.service.store.jobs import (
    FORM_B_RESULT_STATUSES,
    BalanceShort,
    StoredJob,
    create_bulk_job,
    get_job,
    results_page,
)
from listhygiene.service.wire import iso

__all__ = ["MAX_BULK_EMAILS", "install", "job_view"]

MAX_BULK_EMAILS = 10_000


class BulkRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    #: 10,000 addresses of up to 320 characters, with the webhook URL and room to spare.
    max_body_bytes: ClassVar[int] = 4 * 1024 * 1024

    emails: Annotated[list[StrictStr], Field(min_length=1, max_length=MAX_BULK_EMAILS)]
    smtp_check: StrictBool = True
    webhook_url: Annotated[StrictStr, Field(max_length=MAX_URL_LENGTH)] | None = None


def job_view(job: StoredJob, *, submission: bool = False) -> dict[str, Any]:
    """The bulk job resource: the submission response, or the status response."""
    body: dict[str, Any] = {
        "job_id": job.id,
        "status": job.status,
        "total": job.total,
        "processed": job.processed,
        "valid": job.valid,
        "invalid": job.invalid,
        "unknown": job.unknown,
        "accept_all": job.accept_all,
    }
    settled = job.status in ("completed", "failed")
    body["credits_used"] = job.credits_used if settled else job.credits_reserved
    body["created_at"] = iso(job.created_at)
    if submission:
        return body
    body["progress_percent"] = job.progress_percent
    if job.status == "completed" and job.completed_at is not None:
        body["completed_at"] = iso(job.completed_at)
    if job.status == "failed":
        body["error"] = {
            "code": job.error_code or "INTERNAL_ERROR",
            "message": job.error_message or "The job failed",
        }
    return body


def install(root: FastAPI, app_a: FastAPI, app_b: FastAPI) -> None:
    """Add the bulk routes to form B (the job worker is the server's, see ``app.create_app``)."""

    async def own_job(request: Request, key: FormBKey, job_id: str) -> StoredJob:
        job = await run_in_threadpool(get_job, request.app.state.store, key.row.id, job_id)
        if job is None:
            raise FormBJobNotFound(details=f"No bulk job {job_id!r}")
        return job

    @app_b.post("/verify/bulk")
    async def submit(
        request: Request, key: Annotated[FormBKey, Depends(form_b_key)]
    ) -> dict[str, Any]:
        body = await read_body(request, BulkRequest, FormBInvalidRequest)
        if body.webhook_url is not None:
            await guard_url(request.app.state, body.webhook_url, FormBInvalidRequest)
        try:
            job = await run_in_threadpool(
                create_bulk_job,
                request.app.state.store,
                key.row.id,
                body.emails,
                check_smtp=body.smtp_check,
                webhook_url=body.webhook_url,
            )
        except BalanceShort as exc:
            raise FormBInsufficientCredits(details=str(exc)) from None
        request.app.state.worker.wake()
        return job_view(job, submission=True)

    @app_b.get("/verify/bulk/{job_id}")
    async def status(
        job_id: str, request: Request, key: Annotated[FormBKey, Depends(form_b_key)]
    ) -> dict[str, Any]:
        return job_view(await own_job(request, key, job_id))

    @app_b.get("/verify/bulk/{job_id}/results")
    async def results(
        job_id: str,
        request: Request,
        key: Annotated[FormBKey, Depends(form_b_key)],
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        offset: Annotated[int, Query(ge=0)] = 0,
        status: Annotated[str | None, Query()] = None,
    ) -> dict[str, Any]:
        if status is not None and status not in FORM_B_RESULT_STATUSES:
            raise FormBInvalidRequest(
                details=f"status must be one of {', '.join(FORM_B_RESULT_STATUSES)}"
            )
        job = await own_job(request, key, job_id)
        if job.status != "completed":
            raise FormBInvalidRequest(details=f"Job {job_id} is {job.status}, not completed")
        # A job holds at most MAX_BULK_EMAILS rows: any offset past that is the documented empty
        # page, and the database never sees a number it cannot hold (SQLite: 64 bits).
        total, items = await run_in_threadpool(
            results_page,
            request.app.state.store,
            job.id,
            status,
            limit,
            min(offset, MAX_BULK_EMAILS),
        )
        return {
            "job_id": job.id,
            "total": total,
            "limit": limit,
            "offset": offset,
            "results": [result_item(email, result) for email, result in items],
        }


def result_item(email: str, result: VerificationResult) -> dict[str, Any]:
    """One item of a results page: form B's ``/verify`` answer for the submitted ``email``, with
    the reason also inside ``result``."""
    view = result.to_form_b()
    view["email"] = email
    view["result"] = {**view["result"], "reason": view["reason"]}
    return view
