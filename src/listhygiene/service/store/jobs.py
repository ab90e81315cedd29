"""Jobs in the store (form A file jobs, form B bulk jobs): create, claim, resume, save results,
settle, read results.

A job's life:

1. :func:`create_bulk_job` / :func:`create_file_job` reserve one credit per distinct address and
   write the job (form B's starts ``processing``, form A's ``pending``, as each spec shows) and
   its rows, in one transaction: either all of it or nothing.
2. A worker takes it with :func:`claim_job` (``SELECT … FOR UPDATE SKIP LOCKED`` on PostgreSQL,
   ``BEGIN IMMEDIATE`` on SQLite). A claim carries a heartbeat; a job whose worker has not been
   heard of for ``stale_after`` seconds is claimed again by another.
3. The worker verifies :func:`pending_addresses` only (the distinct addresses without a row in
   ``job_results``), so a resumed job verifies and charges nothing twice, and writes the results
   in batches with :func:`save_results` (duplicates ignored; counts follow the rows inserted).
4. :func:`finish_job` (or :func:`fail_job`) settles the credits once: the reserved credits that no
   result used (unknown results are free) go back to the key; the caller's ``announce`` queues
   the job's event in the same transaction (``service/events.py``).

The store returns records (:class:`StoredJob`, results as :class:`VerificationResult`); the
forms turn them into wire payloads (``service/wire.py``, the routers), so that nothing here
imports the service's HTTP or delivery code (issue 16).

Each address is verified and charged once. Form B's counts (``processed``, ``valid`` …) count
submitted rows, duplicates included, so that they reach ``total``; form A's count distinct
addresses by form A status, so that they reach ``total_emails`` (PRODUCT.md: distinct addresses).
A form A row whose email cell holds no address (blank, a placeholder) has no address to verify:
it is in the result file as invalid (``invalid_syntax``), free, and in no count.
"""

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, and_, bindparam, func, insert, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite

from listhygiene.engine.syntax import parse_address
from listhygiene.errors import ListHygieneError
from listhygiene.results import VerificationResult
from listhygiene.service.store.models import Job, JobResult, JobRow, new_id, utcnow
from listhygiene.service.store.store import Store

__all__ = [
    "FORM_A_RESULT_FILTERS",
    "FORM_B_RESULT_STATUSES",
    "Announce",
    "BalanceShort",
    "LostClaim",
    "PreparedResults",
    "StoredJob",
    "UploadedRow",
    "claim_job",
    "create_bulk_job",
    "create_file_job",
    "duplicate_addresses",
    "fail_job",
    "file_result_rows",
    "finish_job",
    "get_job",
    "heartbeat",
    "pending_addresses",
    "prepare_results",
    "release_job",
    "results_page",
    "save_prepared",
    "save_results",
]

#: The statuses a results page can be filtered by (the spec names the first three).
FORM_B_RESULT_STATUSES = ("valid", "invalid", "unknown", "accept_all")
#: Form A file results can be filtered by these statuses (spec/form-a.md).
FORM_A_RESULT_FILTERS = ("valid", "invalid", "catchall", "role", "unknown")
_COUNT_COLUMNS = {
    # form B's statuses
    "b": {
        "valid": "valid_count",
        "invalid": "invalid_count",
        "unknown": "unknown_count",
        "accept_all": "accept_all_count",
    },
    # form A's
    "a": {
        "valid": "valid_count",
        "invalid": "invalid_count",
        "unknown": "unknown_count",
        "role": "role_count",
        "catchall": "catchall_count",
        "disposable": "disposable_count",
        "risky": "risky_count",
    },
}
_KINDS = {"a": "file", "b": "bulk"}
_OPEN = ("pending", "processing")


class BalanceShort(ListHygieneError):
    """The key's balance does not cover the job's distinct addresses (nothing was written); the
    forms answer it as their own insufficient-credits error."""

    def __init__(self, needed: int) -> None:
        super().__init__(f"{needed} credits needed")
        self.needed = needed


class LostClaim(ListHygieneError):
    """The job is no longer this worker's (another worker took it over, or it is finished)."""


@dataclass(frozen=True)
class StoredJob:
    """A job as stored: form A's file job (``form == "a"``) or form B's bulk job."""

    id: str
    api_key_id: str
    form: str
    kind: str
    status: str
    total: int
    unique: int
    processed: int
    valid: int
    invalid: int
    unknown: int
    accept_all: int
    role: int
    catchall: int
    disposable: int
    risky: int
    file_name: str | None
    file_size: int | None
    email_column: str | None
    columns: list[str] | None
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
        # Form A's progress is over distinct addresses, form B's over submitted rows.
        of = self.unique if self.form == "a" else self.total
        if self.status == "completed" or of == 0:
            return 100 if self.status == "completed" else 0
        return min(100, self.processed * 100 // of)


@dataclass(frozen=True)
class UploadedRow:
    """One row of an uploaded file: its email cell, the address read from it (None when the cell
    holds none), and all its cells in the file's column order."""

    email: str
    address: str | None
    cells: list[Any]


def _job(row: Any) -> StoredJob:
    return StoredJob(
        id=row.id,
        api_key_id=row.api_key_id,
        form=row.form,
        kind=row.kind,
        status=row.status,
        total=row.total_rows,
        unique=row.unique_emails,
        processed=row.processed,
        valid=row.valid_count,
        invalid=row.invalid_count,
        unknown=row.unknown_count,
        accept_all=row.accept_all_count,
        role=row.role_count,
        catchall=row.catchall_count,
        disposable=row.disposable_count,
        risky=row.risky_count,
        file_name=row.file_name,
        file_size=row.file_size,
        email_column=row.email_column,
        columns=row.columns,
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


def _read(conn: Connection, job_id: str) -> StoredJob | None:
    row = conn.execute(select(Job.__table__).where(Job.id == job_id)).first()
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
) -> StoredJob:
    """Reserve the credits and write a form B bulk job (``processing``) and its rows, all or
    nothing.

    Raises :class:`BalanceShort` (and writes nothing) when the balance is short.
    """
    rows = [UploadedRow(e, address_of(e), []) for e in emails]
    job = {"form": "b", "kind": "bulk", "status": "processing", "check_smtp": check_smtp}
    return _create(store, key_id, rows, {**job, "webhook_url": webhook_url}, cells=False)


def create_file_job(
    store: Store,
    key_id: str,
    rows: Sequence[UploadedRow],
    *,
    file_name: str,
    file_size: int,
    email_column: str,
    columns: Sequence[str],
) -> StoredJob:
    """Reserve the credits and write a form A file job (``pending``) and its rows, all or nothing.

    Raises :class:`BalanceShort` (and writes nothing) when the balance is short.
    """
    job = {"form": "a", "kind": "file", "status": "pending", "check_smtp": True}
    return _create(
        store,
        key_id,
        rows,
        {
            **job,
            "file_name": file_name,
            "file_size": file_size,
            "email_column": email_column,
            "columns": list(columns),
        },
        cells=True,
    )


_ROW_CHUNK = 5_000


def _create(
    store: Store,
    key_id: str,
    rows: Sequence[UploadedRow],
    values: dict[str, Any],
    *,
    cells: bool,
) -> StoredJob:
    """Reserve one credit per distinct address, then insert the job and its rows (the row's cells
    too when ``cells``), in one transaction."""
    unique = len({r.address for r in rows if r.address is not None})
    job_id = new_id()
    with store.transaction(write=True) as conn:
        if not store.reserve_credits(key_id, unique, conn=conn):
            raise BalanceShort(unique)
        conn.execute(
            insert(Job).values(
                id=job_id,
                api_key_id=key_id,
                total_rows=len(rows),
                unique_emails=unique,
                credits_reserved=unique,
                credits_used=0,
                processed=0,
                created_at=utcnow(),
                **values,
            )
        )
        for start in range(0, len(rows), _ROW_CHUNK):
            conn.execute(
                insert(JobRow),
                [
                    {
                        "job_id": job_id,
                        "position": start + i,
                        "email": r.email,
                        "address": r.address,
                        "row": r.cells if cells else None,
                    }
                    for i, r in enumerate(rows[start : start + _ROW_CHUNK])
                ],
            )
        job = _read(conn, job_id)
    assert job is not None
    return job


def get_job(store: Store, key_id: str, job_id: str, *, form: str = "b") -> StoredJob | None:
    """``key_id``'s job ``job_id`` of ``form``; None if there is none (or it is another key's, or
    the other form's)."""
    with store.transaction() as conn:
        job = _read(conn, job_id)
    if job is None or job.api_key_id != key_id or job.form != form:
        return None
    return job


# -- claiming ------------------------------------------------------------------------------------


def claim_job(store: Store, worker_id: str, *, stale_after: float = 60) -> StoredJob | None:
    """Take the oldest open job (of either form) that nobody holds, or whose holder went
    silent."""
    now = utcnow()
    stale = now - timedelta(seconds=stale_after)
    query = (
        select(Job.id)
        .where(
            Job.status.in_(_OPEN),
            or_(Job.claimed_by.is_(None), Job.heartbeat_at.is_(None), Job.heartbeat_at < stale),
        )
        .order_by(Job.created_at, Job.id)
        .limit(1)
    )
    # A look first, without the write lock: an idle worker polls several times a second, and on
    # SQLite each write transaction would queue the server processes' writes behind it.
    with store.transaction() as conn:
        if conn.execute(query).first() is None:
            return None
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
    # write=True: on SQLite a writer queues for its turn instead of in the busy handler
    # (docs/service.md, "Fairness")
    with store.transaction(write=True) as conn:
        done = conn.execute(
            update(Job).where(_held(worker_id, job_id)).values(heartbeat_at=utcnow())
        )
        return done.rowcount == 1


def release_job(store: Store, job_id: str, worker_id: str) -> None:
    """Give the job back at once (a worker stopping cleanly), for any worker to resume."""
    with store.transaction(write=True) as conn:
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


@dataclass(frozen=True)
class PreparedResults:
    """A batch of one job's results made ready to write (:func:`prepare_results`): the rows of
    ``job_results``, each address's form A and form B status, and the addresses charged."""

    job_id: str
    rows: list[dict[str, str]]
    statuses: dict[str, tuple[str, str]]
    charged: frozenset[str]


def prepare_results(
    job_id: str, results: Iterable[tuple[str, VerificationResult]]
) -> PreparedResults:
    """The CPU part of a save (the results serialised; the first of an address kept), which
    needs no database: done before the write transaction, so that it holds the write lock for
    the statements only (docs/service.md, "Fairness")."""
    by_address: dict[str, VerificationResult] = {}
    for address, result in results:
        by_address.setdefault(address, result)
    rows = []
    statuses: dict[str, tuple[str, str]] = {}
    for address, result in by_address.items():
        status_b, _ = result.form_b_status()
        status = statuses[address] = (str(result.status.value), str(status_b.value))
        rows.append(
            {
                "job_id": job_id,
                "address": address,
                "status": status[0],
                "status_b": status[1],
                "result": result.model_dump_json(),
            }
        )
    charged = frozenset(a for a, result in by_address.items() if result.credits_used > 0)
    return PreparedResults(job_id, rows, statuses, charged)


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
    return save_prepared(store, prepare_results(job_id, results), worker_id=worker_id)


def save_prepared(
    store: Store,
    batch: PreparedResults,
    *,
    worker_id: str | None = None,
    duplicates: Mapping[str, int] | None = None,
) -> int:
    """:func:`save_results` of a batch made ready by :func:`prepare_results`.

    On SQLite the write transaction holds the lock that every other writer of the file, the
    server's admissions included, waits for (docs/service.md, "Fairness"), so it holds it for
    the statements only: the heartbeat, one executemany of the rows, and the counts. How many
    submitted rows each address has (form B counts rows) is fixed when the job is created: a
    worker reads it once per job (``duplicates``, :func:`duplicate_addresses`); without it, it
    is read for the batch before the transaction.
    """
    job_id = batch.job_id
    if duplicates is not None:
        copies: Mapping[str, int] = {a: duplicates.get(a, 1) for a in batch.statuses}
    else:
        copies = _copies(store, job_id, list(batch.statuses)) if batch.rows else {}
    statements = _save_statements(store.backend)
    now = utcnow()
    with store.transaction(write=True) as conn:
        # Take the job's row lock first (PostgreSQL), so that counts are added once.
        if worker_id:
            held = {"job_id": job_id, "worker_id": worker_id, "now": now}
            form = conn.execute(statements.beat_held, held).scalar_one_or_none()
        else:
            beat = {"job_id": job_id, "now": now}
            form = conn.execute(statements.beat, beat).scalar_one_or_none()
        if form is None:
            raise LostClaim(job_id)
        if not batch.rows:
            return 0
        # An executemany: one cached statement, whatever the batch's size (a ``.values(rows)``
        # of 100 rows was compiled anew for each batch, half the transaction's CPU).
        inserted = set(conn.execute(statements.insert, batch.rows).scalars())
        if not inserted:
            return 0
        columns = _COUNT_COLUMNS[form]
        which = 0 if form == "a" else 1
        added = {f"n_{column}": 0 for column in columns.values()}
        processed = 0
        for address in inserted:
            # form A counts distinct addresses, form B submitted rows, duplicates included
            n = 1 if form == "a" else copies.get(address, 0)
            processed += n
            added[f"n_{columns[batch.statuses[address][which]]}"] += n
        counts = {
            "job_id": job_id,
            "n_processed": processed,
            "n_credits_used": len(inserted & batch.charged),
            **added,
        }
        conn.execute(statements.counts[form], counts)
        return len(inserted)


@dataclass(frozen=True)
class _SaveStatements:
    """The statements of a save, built once per backend with bound parameters: on SQLite a save
    holds the write lock the server's admissions wait for, and building SQLAlchemy statements
    anew in each save was most of its time under the lock (``benchmarks/saves.py``; the figures
    are in the CHANGELOG)."""

    beat_held: Any
    beat: Any
    insert: Any
    counts: dict[str, Any]


@functools.cache
def _save_statements(backend: str) -> _SaveStatements:
    dialect_insert = postgresql.insert if backend == "postgresql" else sqlite.insert
    job_id: Any = bindparam("job_id", type_=Job.__table__.c.id.type)
    beat: dict[str, Any] = {"heartbeat_at": bindparam("now")}
    held = and_(Job.id == job_id, Job.claimed_by == bindparam("worker_id"), Job.status.in_(_OPEN))
    counts: dict[str, Any] = {}
    for form, columns in _COUNT_COLUMNS.items():
        names = ["processed", "credits_used", *columns.values()]
        added = {name: getattr(Job, name) + bindparam(f"n_{name}") for name in names}
        counts[form] = update(Job).where(Job.id == job_id).values(**added)
    return _SaveStatements(
        beat_held=update(Job).where(held).values(**beat).returning(Job.form),
        beat=update(Job).where(Job.id == job_id).values(**beat).returning(Job.form),
        insert=dialect_insert(JobResult)
        .on_conflict_do_nothing(index_elements=[JobResult.job_id, JobResult.address])
        .returning(JobResult.address),
        counts=counts,
    )


def duplicate_addresses(store: Store, job_id: str) -> dict[str, int]:
    """The job's addresses submitted more than once, with their number of rows: what a worker
    reads once per job for :func:`save_prepared` (every other address has one row).

    One grouped read of the job's rows. Read per save instead, for each batch's addresses, a
    job just written has no statistics yet and PostgreSQL's planner reads all the job's rows
    for each batch, so the saves' cost grows with the job (``benchmarks/saves.py``;
    docs/service.md, "Fairness")."""
    query = (
        select(JobRow.address, func.count())
        .where(JobRow.job_id == job_id, JobRow.address.is_not(None))
        .group_by(JobRow.address)
        .having(func.count() > 1)
    )
    with store.transaction() as conn:
        return {str(address): int(number) for address, number in conn.execute(query)}


def _copies(store: Store, job_id: str, addresses: list[str]) -> dict[str, int]:
    """How many of the job's submitted rows hold each of ``addresses`` (a read: the rows do not
    change once the job is created)."""
    with store.transaction() as conn:
        counted = conn.execute(
            select(JobRow.address, func.count())
            .where(JobRow.job_id == job_id, JobRow.address.in_(addresses))
            .group_by(JobRow.address)
        )
        return {str(address): int(number) for address, number in counted}


def _settle(store: Store, conn: Connection, job: StoredJob) -> None:
    unused = job.credits_reserved - job.credits_used
    if unused > 0:
        store.refund_credits(job.api_key_id, unused, conn=conn)


#: Called with the store, the closing transaction's connection and the closed job, to queue its
#: event in that transaction (``service/events.py``).
Announce = Callable[[Store, Connection, StoredJob], None]


def finish_job(
    store: Store,
    job_id: str,
    worker_id: str | None = None,
    *,
    announce: Announce | None = None,
) -> StoredJob | None:
    """Complete the job and settle its credits, once; None if it was already settled."""
    return _close(store, job_id, worker_id, announce, status="completed")


def fail_job(
    store: Store,
    job_id: str,
    code: str,
    message: str,
    worker_id: str | None = None,
    *,
    announce: Announce | None = None,
) -> StoredJob | None:
    """Fail the job and settle its credits (only results saved are charged), once."""
    return _close(store, job_id, worker_id, announce, status="failed", code=code, message=message)


def _close(
    store: Store,
    job_id: str,
    worker_id: str | None,
    announce: Announce | None,
    *,
    status: str,
    code: str | None = None,
    message: str | None = None,
) -> StoredJob | None:
    with store.transaction(write=True) as conn:
        holder = (
            _held(worker_id, job_id) if worker_id else and_(Job.id == job_id, Job.status.in_(_OPEN))
        )
        # The conditional update is the once-only guard: a second close matches nothing.
        closed = conn.execute(
            update(Job)
            .where(holder)
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
        if announce is not None:
            announce(store, conn, job)
        return job


def file_result_rows(
    store: Store, job_id: str, statuses: Iterable[str] | None = None, *, chunk: int = 2_000
) -> Iterator[tuple[list[Any], VerificationResult | None]]:
    """A file job's rows in upload order, each with its cells and its address's result (None for
    a row whose cell holds no address), keeping those whose form A status is in ``statuses`` (a
    row without an address counts as invalid); every row when ``statuses`` is None.

    Read ``chunk`` rows per short transaction, so that a long download holds no connection.
    """
    joined = JobRow.__table__.outerjoin(
        JobResult.__table__,
        and_(JobResult.job_id == JobRow.job_id, JobResult.address == JobRow.address),
    )
    where: list[Any] = [JobRow.job_id == job_id]
    if statuses is not None:
        wanted = sorted(set(statuses))
        kept = [JobResult.status.in_(wanted)]
        if "invalid" in wanted:
            kept.append(JobRow.address.is_(None))
        where.append(or_(*kept))
    after = -1
    while True:
        query = (
            select(JobRow.position, JobRow.row, JobRow.address, JobResult.result)
            .select_from(joined)
            .where(*where, JobRow.position > after)
            .order_by(JobRow.position)
            .limit(chunk)
        )
        with store.transaction() as conn:
            page = conn.execute(query).all()
        # Duplicates of an address within the page share one parsed result; the memory held is
        # one page's, whatever the size of the job.
        parsed: dict[str, VerificationResult] = {}
        for position, cells, address, raw in page:
            result = None
            if raw is not None:
                result = parsed.get(address)
                if result is None:
                    result = parsed[address] = VerificationResult.model_validate_json(raw)
            yield list(cells or []), result
            after = position
        if len(page) < chunk:
            return


def results_page(
    store: Store, job_id: str, status: str | None, limit: int, offset: int
) -> tuple[int, list[tuple[str, VerificationResult]]]:
    """``(rows matching the filter, the page)``: one ``(submitted email, result)`` per submitted
    row, in order (form B's route turns them into its items)."""
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
    return total, [(email, VerificationResult.model_validate_json(raw)) for email, raw in rows]
