"""Form B bulk jobs in the store: create, claim, resume, save results, settle, page results.

A job's life:

1. :func:`create_bulk_job` reserves one credit per distinct address and writes the job (status
   ``processing``) and its rows, in one transaction: either all of it or nothing.
2. A worker takes it with :func:`claim_job` (``SELECT … FOR UPDATE SKIP LOCKED`` on PostgreSQL,
   ``BEGIN IMMEDIATE`` on SQLite). A claim carries a heartbeat; a job whose worker has not been
   heard of for ``stale_after`` seconds is claimed again by another.
3. The worker verifies :func:`pending_addresses` only (the distinct addresses without a row in
   ``job_results``), so a resumed job verifies and charges nothing twice, and writes the results
   in batches with :func:`save_results` (duplicates ignored; counts follow the rows inserted).
4. :func:`finish_job` (or :func:`fail_job`) settles the credits once: the reserved credits that no
   result used (unknown results are free) go back to the key.

Counts (``processed``, ``valid`` …) count submitted rows, duplicates included, so that they reach
``total``; each address is verified and charged once.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, and_, func, insert, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite

from listhygiene.engine.syntax import parse_address
from listhygiene.results import VerificationResult
from listhygiene.service.store.models import Job, JobResult, JobRow, new_id, utcnow
from listhygiene.service.store.store import Store

__all__ = [
    "FORM_B_RESULT_STATUSES",
    "BulkJob",
    "InsufficientCredits",
    "LostClaim",
    "claim_job",
    "create_bulk_job",
    "fail_job",
    "finish_job",
    "get_job",
    "heartbeat",
    "pending_addresses",
    "release_job",
    "results_page",
    "save_results",
]

#: The statuses a results page can be filtered by (the spec names the first three).
FORM_B_RESULT_STATUSES = ("valid", "invalid", "unknown", "accept_all")
_COUNT_COLUMNS = {
    "valid": "valid_count",
    "invalid": "invalid_count",
    "unknown": "unknown_count",
    "accept_all": "accept_all_count",
}
_OPEN = ("pending", "processing")


class InsufficientCredits(Exception):
    """The key's balance does not cover the job's distinct addresses (nothing was written)."""

    def __init__(self, needed: int) -> None:
        super().__init__(f"{needed} credits needed")
        self.needed = needed


class LostClaim(Exception):
    """The job is no longer this worker's (another worker took it over, or it is finished)."""


@dataclass(frozen=True)
class BulkJob:
    id: str
    api_key_id: str
    status: str
    total: int
    unique: int
    processed: int
    valid: int
    invalid: int
    unknown: int
    accept_all: int
    credits_reserved: int
    credits_used: int
    check_smtp: bool
    webhook_url: str | None
    error_code: str | None
    error_message: str | None
    claimed_by: str | None
    created_at: datetime
    started_at: datetime | None
    completed_at: datetime | None

    @property
    def progress_percent(self) -> int:
        if self.status == "completed" or self.total == 0:
            return 100 if self.status == "completed" else 0
        return min(100, self.processed * 100 // self.total)


def _job(row: Any) -> BulkJob:
    return BulkJob(
        id=row.id,
        api_key_id=row.api_key_id,
        status=row.status,
        total=row.total_rows,
        unique=row.unique_emails,
        processed=row.processed,
        valid=row.valid_count,
        invalid=row.invalid_count,
        unknown=row.unknown_count,
        accept_all=row.accept_all_count,
        credits_reserved=row.credits_reserved,
        credits_used=row.credits_used,
        check_smtp=row.check_smtp,
        webhook_url=row.webhook_url,
        error_code=row.error_code,
        error_message=row.error_message,
        claimed_by=row.claimed_by,
        created_at=row.created_at,
        started_at=row.started_at,
        completed_at=row.completed_at,
    )


_BULK = and_(Job.form == "b", Job.kind == "bulk")


def _read(conn: Connection, job_id: str) -> BulkJob | None:
    row = conn.execute(select(Job.__table__).where(Job.id == job_id, _BULK)).first()
    return _job(row) if row is not None else None


def address_of(email: str) -> str:
    """The key a submitted string is verified under: the normalised address, else as given."""
    parsed = parse_address(email)
    return parsed.email if parsed is not None else email


# -- creation ------------------------------------------------------------------------------------


def create_bulk_job(
    store: Store,
    key_id: str,
    emails: Sequence[str],
    *,
    check_smtp: bool,
    webhook_url: str | None = None,
) -> BulkJob:
    """Reserve the credits and write the job and its rows, all or nothing.

    Raises :class:`InsufficientCredits` (and writes nothing) when the balance is short.
    """
    addresses = [address_of(e) for e in emails]
    unique = len(set(addresses))
    job_id = new_id()
    now = utcnow()
    with store.transaction(write=True) as conn:
        if not store.reserve_credits(key_id, unique, conn=conn):
            raise InsufficientCredits(unique)
        conn.execute(
            insert(Job).values(
                id=job_id,
                api_key_id=key_id,
                form="b",
                kind="bulk",
                status="processing",
                total_rows=len(emails),
                unique_emails=unique,
                check_smtp=check_smtp,
                webhook_url=webhook_url,
                credits_reserved=unique,
                credits_used=0,
                processed=0,
                created_at=now,
            )
        )
        conn.execute(
            insert(JobRow),
            [
                {"job_id": job_id, "position": i, "email": e, "address": a, "row": None}
                for i, (e, a) in enumerate(zip(emails, addresses, strict=True))
            ],
        )
        job = _read(conn, job_id)
    assert job is not None
    return job


def get_job(store: Store, key_id: str, job_id: str) -> BulkJob | None:
    """``key_id``'s bulk job ``job_id``; None if there is none (or it is another key's)."""
    with store.transaction() as conn:
        job = _read(conn, job_id)
    return job if job is not None and job.api_key_id == key_id else None


# -- claiming ------------------------------------------------------------------------------------


def claim_job(store: Store, worker_id: str, *, stale_after: float = 60) -> BulkJob | None:
    """Take the oldest open bulk job that nobody holds (or whose holder went silent)."""
    now = utcnow()
    stale = now - timedelta(seconds=stale_after)
    query = (
        select(Job.id)
        .where(
            _BULK,
            Job.status.in_(_OPEN),
            or_(Job.claimed_by.is_(None), Job.heartbeat_at.is_(None), Job.heartbeat_at < stale),
        )
        .order_by(Job.created_at, Job.id)
        .limit(1)
    )
    if store.backend == "postgresql":
        query = query.with_for_update(skip_locked=True)
    with store.transaction(write=True) as conn:
        job_id = conn.execute(query).scalar_one_or_none()
        if job_id is None:
            return None
        conn.execute(
            update(Job)
            .where(Job.id == job_id)
            .values(
                status="processing",
                claimed_by=worker_id,
                claimed_at=now,
                heartbeat_at=now,
                started_at=func.coalesce(Job.started_at, now),
            )
        )
        return _read(conn, job_id)


def _held(worker_id: str, job_id: str) -> Any:
    return and_(Job.id == job_id, Job.claimed_by == worker_id, Job.status.in_(_OPEN))


def heartbeat(store: Store, job_id: str, worker_id: str) -> bool:
    """Say the worker is alive; False if the job is no longer its."""
    with store.transaction() as conn:
        done = conn.execute(
            update(Job).where(_held(worker_id, job_id)).values(heartbeat_at=utcnow())
        )
        return done.rowcount == 1


def release_job(store: Store, job_id: str, worker_id: str) -> None:
    """Give the job back at once (a worker stopping cleanly), for any worker to resume."""
    with store.transaction() as conn:
        conn.execute(
            update(Job)
            .where(_held(worker_id, job_id))
            .values(claimed_by=None, claimed_at=None, heartbeat_at=None)
        )


def pending_addresses(store: Store, job_id: str) -> list[str]:
    """The job's distinct addresses that have no result yet, in submission order."""
    done = select(JobResult.address).where(JobResult.job_id == job_id)
    query = (
        select(JobRow.address, func.min(JobRow.position).label("first"))
        .where(JobRow.job_id == job_id, JobRow.address.is_not(None), JobRow.address.not_in(done))
        .group_by(JobRow.address)
        .order_by("first")
    )
    with store.transaction() as conn:
        return [row.address for row in conn.execute(query)]


# -- results -------------------------------------------------------------------------------------


def save_results(
    store: Store,
    job_id: str,
    results: Iterable[tuple[str, VerificationResult]],
    *,
    worker_id: str | None = None,
) -> int:
    """Write results (an address already there is ignored), update the counts, heartbeat.

    Returns how many addresses were new. With ``worker_id``, raises :class:`LostClaim` (writing
    nothing) if the job is no longer that worker's.
    """
    by_address: dict[str, VerificationResult] = {}
    for address, result in results:
        by_address.setdefault(address, result)
    dialect_insert = postgresql.insert if store.backend == "postgresql" else sqlite.insert
    with store.transaction(write=True) as conn:
        holder = _held(worker_id, job_id) if worker_id else and_(Job.id == job_id, _BULK)
        # Take the job's row lock first (PostgreSQL), so that counts are added once.
        touched = conn.execute(update(Job).where(holder).values(heartbeat_at=utcnow())).rowcount
        if touched != 1:
            raise LostClaim(job_id)
        if not by_address:
            return 0
        rows = []
        for address, result in by_address.items():
            status_b, _ = result.form_b_status()
            rows.append(
                {
                    "job_id": job_id,
                    "address": address,
                    "status": str(result.status.value),
                    "status_b": str(status_b.value),
                    "result": result.model_dump_json(),
                }
            )
        inserted = set(
            conn.execute(
                dialect_insert(JobResult)
                .values(rows)
                .on_conflict_do_nothing(index_elements=[JobResult.job_id, JobResult.address])
                .returning(JobResult.address)
            ).scalars()
        )
        if not inserted:
            return 0
        counted = conn.execute(
            select(JobRow.address, func.count())
            .where(JobRow.job_id == job_id, JobRow.address.in_(inserted))
            .group_by(JobRow.address)
        )
        copies: dict[str, int] = {row[0]: row[1] for row in counted}
        values: dict[str, Any] = {}
        added = dict.fromkeys(_COUNT_COLUMNS.values(), 0)
        processed = used = 0
        for address in inserted:
            result = by_address[address]
            n = copies.get(address, 0)
            processed += n
            added[_COUNT_COLUMNS[result.form_b_status()[0].value]] += n
            used += 1 if result.credits_used > 0 else 0
        values["processed"] = Job.processed + processed
        values["credits_used"] = Job.credits_used + used
        for column, n in added.items():
            if n:
                values[column] = getattr(Job, column) + n
        conn.execute(update(Job).where(Job.id == job_id).values(**values))
        return len(inserted)


def _settle(store: Store, conn: Connection, job: BulkJob) -> None:
    unused = job.credits_reserved - job.credits_used
    if unused > 0:
        store.refund_credits(job.api_key_id, unused, conn=conn)


def finish_job(store: Store, job_id: str, worker_id: str | None = None) -> BulkJob | None:
    """Complete the job and settle its credits, once; None if it was already settled."""
    return _close(store, job_id, worker_id, status="completed")


def fail_job(
    store: Store, job_id: str, code: str, message: str, worker_id: str | None = None
) -> BulkJob | None:
    """Fail the job and settle its credits (only results saved are charged), once."""
    return _close(store, job_id, worker_id, status="failed", code=code, message=message)


def _close(
    store: Store,
    job_id: str,
    worker_id: str | None,
    *,
    status: str,
    code: str | None = None,
    message: str | None = None,
) -> BulkJob | None:
    with store.transaction(write=True) as conn:
        holder = (
            _held(worker_id, job_id) if worker_id else and_(Job.id == job_id, Job.status.in_(_OPEN))
        )
        # The conditional update is the once-only guard: a second close matches nothing.
        closed = conn.execute(
            update(Job)
            .where(holder, _BULK)
            .values(
                status=status,
                completed_at=utcnow(),
                error_code=code,
                error_message=message,
                heartbeat_at=utcnow(),
            )
        ).rowcount
        if closed != 1:
            return None
        job = _read(conn, job_id)
        assert job is not None
        _settle(store, conn, job)
        _announce(store, conn, job)
        return job


def _announce(store: Store, conn: Any, job: "BulkJob") -> None:
    """Queue ``bulk.completed`` / ``bulk.failed`` in the transaction that closes the job (a
    transactional outbox: the event exists exactly when the job is closed, even across a crash),
    for the key's webhooks and the submission's ``webhook_url``."""
    from listhygiene.service.delivery import notify_sync

    event = "bulk.completed" if job.status == "completed" else "bulk.failed"
    data = {
        "job_id": job.id,
        "status": job.status,
        "total": job.total,
        "valid": job.valid,
        "invalid": job.invalid,
        "unknown": job.unknown,
    }
    notify_sync(store, job.api_key_id, "b", event, data, extra_url=job.webhook_url, conn=conn)


def results_page(
    store: Store, job_id: str, status: str | None, limit: int, offset: int
) -> tuple[int, list[dict[str, Any]]]:
    """``(rows matching the filter, the page)``: one item per submitted row, in order."""
    joined = JobRow.__table__.join(
        JobResult.__table__,
        and_(JobResult.job_id == JobRow.job_id, JobResult.address == JobRow.address),
    )
    where = [JobRow.job_id == job_id]
    if status is not None:
        where.append(JobResult.status_b == status)
    count = select(func.count()).select_from(joined).where(*where)
    page = (
        select(JobRow.email, JobResult.result)
        .select_from(joined)
        .where(*where)
        .order_by(JobRow.position)
        .limit(limit)
        .offset(offset)
    )
    with store.transaction() as conn:
        total = conn.execute(count).scalar_one()
        rows = conn.execute(page).all()
    return total, [_item(email, raw) for email, raw in rows]


def _item(email: str, raw: str) -> dict[str, Any]:
    view = VerificationResult.model_validate_json(raw).to_form_b()
    view["email"] = email
    view["result"] = {**view["result"], "reason": view["reason"]}
    return view
