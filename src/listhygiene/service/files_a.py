"""Form A file jobs: upload a file, follow the job, download the result file.

- ``POST /verify/file``: a multipart ``file`` (.csv, .xlsx, .xls, .txt) and an optional
  ``email_column``. The upload is checked while it streams (see :mod:`.upload`) and read in a
  child process within the upload limits (:mod:`.parse_process`); its rows are
  stored with the job, so that any server process on the same store can run it and serve its
  results. Credits for the distinct addresses are reserved at once (402 ``4020`` otherwise);
  the job starts ``pending``.
- ``GET /verify/file/{job_id}``: the in-progress shape, then the completed shape with the extra
  fields; a failed job adds ``error: {code, message}``. Counts are over distinct addresses, by
  form A status, and reach ``total_emails``.
- ``GET /verify/file/{job_id}/results``: the result file, streamed from the store as CSV; one row
  per uploaded row, the row's own cells first. Flags ``valid``, ``invalid``, ``catchall``,
  ``role``, ``unknown`` keep the rows whose status has its flag true; with no flag true, every
  row. A job that has not completed: 400 ``4000``.

Every ``/verify/file`` route counts against the ``file`` rate limit (300 a minute), polling
included: they are the file endpoint of the spec's table.
"""

import csv
import io
import shutil
from collections.abc import Iterator
from pathlib import PurePath
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from listhygiene.errors import FormABadRequest, FormAInsufficientCredits, FormANotFound
from listhygiene.result_file import RESULT_COLUMNS, escape_formula
from listhygiene.results import VerificationResult
from listhygiene.service.auth import form_a_key
from listhygiene.service.parse_process import (
    ParseSlots,
    give_back_memory,
    parse_in_child,
    parse_slot,
)
from listhygiene.service.store import ApiKeyRow, Store
from listhygiene.service.store.jobs import (
    FORM_A_RESULT_FILTERS,
    BalanceShort,
    StoredJob,
    create_file_job,
    file_result_rows,
    get_job,
)
from listhygiene.service.upload import receive_file
from listhygiene.service.wire import file_event_data, file_paths, iso, success
from listhygiene.statuses import Facts

__all__ = ["csv_cell", "install", "job_view"]

_ROWS_PER_CHUNK = 2_000


def job_view(job: StoredJob) -> dict[str, Any]:
    """``GET /verify/file/{job_id}``'s data: the in-progress or the completed shape."""
    data = file_event_data(job)
    view: dict[str, Any] = {
        "job_id": job.id,
        "status": job.status,
        "file_name": job.file_name or "",
        "total_emails": job.unique,
        "processed_emails": job.processed,
        "progress_percent": job.progress_percent,
        "valid_emails": job.valid,
        "invalid_emails": job.invalid,
        "unknown_emails": job.unknown,
        "created_at": iso(job.created_at),
    }
    if job.status == "completed":
        view.update(
            role_emails=job.role,
            catchall_emails=job.catchall,
            disposable_emails=job.disposable,
            credits_used=job.credits_used,
            process_time_seconds=data["process_time_seconds"],
            result_file_path=data["result_file_path"],
            download_url=data["download_url"],
            completed_at=iso(job.completed_at or job.created_at),
        )
    elif job.status == "failed":
        view["error"] = {
            "code": job.error_code or "1000",
            "message": job.error_message or "The job failed",
        }
    return view


def csv_cell(value: Any) -> str:
    """A value as a CSV cell, escaped against formula injection."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return escape_formula(str(value))


def _result_cells(result: VerificationResult) -> list[Any]:
    return [
        result.status.value,
        result.score,
        result.reason.value if result.reason is not None else None,
        result.is_deliverable,
        result.is_disposable,
        result.is_catchall,
        result.is_role,
        result.is_free,
        result.smtp_check,
    ]


def result_header(columns: list[str]) -> list[str]:
    """The row's own columns, then the result columns (``result_<name>`` on a clash, as the
    pipeline's outputs do)."""
    taken = set(columns)
    return columns + [f"result_{n}" if n in taken else n for n in RESULT_COLUMNS]


def result_csv(store: Store, job: StoredJob, statuses: set[str] | None) -> Iterator[bytes]:
    """The result file in chunks of rows (blocking: Starlette iterates it in a thread)."""
    # A cell without an address: invalid, invalid_syntax, free, as in the pipeline.
    blank = _result_cells(VerificationResult.from_facts("", Facts(syntax_valid=False)))
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow([csv_cell(n) for n in result_header(list(job.columns or []))])
    for written, (cells, result) in enumerate(file_result_rows(store, job.id, statuses), 1):
        extra = blank if result is None else _result_cells(result)
        writer.writerow([csv_cell(v) for v in cells] + [csv_cell(v) for v in extra])
        if written % _ROWS_PER_CHUNK == 0:
            yield buffer.getvalue().encode("utf-8")
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue().encode("utf-8")


def install(root: FastAPI, app_a: FastAPI, app_b: FastAPI) -> None:
    """Add the file routes to form A (the job worker is the server's, see ``app.create_app``)."""
    # shared by the processes on this machine that use the same store (parse_process.py)
    slots = ParseSlots.for_store(root.state.store.engine.url)
    app_a.state.parse_slots = slots
    root.state.parse_slots_folder = slots.folder

    async def own_job(request: Request, key: ApiKeyRow, job_id: str) -> StoredJob:
        job = await run_in_threadpool(get_job, request.app.state.store, key.id, job_id, form="a")
        if job is None:
            raise FormANotFound(details=f"No file job {job_id!r}")
        return job

    @app_a.post("/verify/file")
    async def upload(
        request: Request, key: Annotated[ApiKeyRow, Depends(form_a_key("file"))]
    ) -> dict[str, Any]:
        received = await receive_file(request)
        try:
            # Read in a child process, a few at a time (parse_process); the rows are read
            # back from its file a batch at a time while the job is written.
            async with parse_slot(request.app.state.parse_slots, key.id, received.file_name):
                parsed = await parse_in_child(received)
                job = await run_in_threadpool(
                    create_file_job,
                    request.app.state.store,
                    key.id,
                    parsed.rows,
                    file_name=received.file_name,
                    file_size=received.size,
                    email_column=parsed.email_column,
                    columns=parsed.columns,
                )
        except BalanceShort as exc:
            raise FormAInsufficientCredits(details=str(exc)) from None
        finally:
            shutil.rmtree(received.directory, ignore_errors=True)
            give_back_memory()
        request.app.state.worker.wake()
        status_url, _ = file_paths(job.id)
        return success(
            {
                "task_id": job.id,
                "status": job.status,
                "message": "File accepted for verification",
                "file_name": received.file_name,
                "file_size": received.size,
                "estimated_count": job.unique,
                "unique_emails": job.unique,
                "total_rows": job.total,
                "email_column": parsed.email_column,
                "status_url": status_url,
                "created_at": iso(job.created_at),
            }
        )

    @app_a.get("/verify/file/{job_id}")
    async def status(
        job_id: str, request: Request, key: Annotated[ApiKeyRow, Depends(form_a_key("file"))]
    ) -> dict[str, Any]:
        return success(job_view(await own_job(request, key, job_id)))

    @app_a.get("/verify/file/{job_id}/results")
    async def results(
        job_id: str,
        request: Request,
        key: Annotated[ApiKeyRow, Depends(form_a_key("file"))],
        valid: Annotated[bool | None, Query()] = None,
        invalid: Annotated[bool | None, Query()] = None,
        catchall: Annotated[bool | None, Query()] = None,
        role: Annotated[bool | None, Query()] = None,
        unknown: Annotated[bool | None, Query()] = None,
    ) -> StreamingResponse:
        job = await own_job(request, key, job_id)
        if job.status != "completed":
            raise FormABadRequest(details=f"Job {job_id} is {job.status}, not completed")
        flags = (valid, invalid, catchall, role, unknown)
        statuses = {n for n, on in zip(FORM_A_RESULT_FILTERS, flags, strict=True) if on} or None
        stem = PurePath(job.file_name or "results").stem or "results"
        return StreamingResponse(
            result_csv(request.app.state.store, job, statuses),
            media_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": f'attachment; filename="{_ascii(stem)}_results.csv"'},
        )


def _ascii(name: str) -> str:
    """A file name safe inside a quoted header value."""
    return "".join(c if c.isascii() and c.isprintable() and c not in '"\\' else "_" for c in name)
