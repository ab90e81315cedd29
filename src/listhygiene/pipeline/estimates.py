"""What a run would do, verifying nothing: ``clean --estimate`` and ``listhygiene.estimate()``
(PRODUCT.md, "Host self-audit and estimates"; docs/pipeline.md, "Estimating a run").

The input is read as a run reads it (``sources``, the email column, ``email_cells``), a bounded
batch at a time, and each batch is dropped once its addresses are in DuckDB (within
``LISTHYGIENE_WORK_MEMORY``, spilling beyond it). With a verdict store, the batch's addresses
that no batch before had are looked up on a thread of their own while the next batch is read
(``VerdictStore.fetch`` and ``Freshness.reusable``: the run's own rules), and those the run
would reuse are kept in DuckDB too. The distinct addresses then come back :data:`DISTINCT_BATCH`
at a time, each checked by the engine's syntax rules (``parse_columns``), and those left to
verify are counted per domain for the time model (:mod:`listhygiene.pipeline.pace`). So
``reused`` and ``to_verify`` are the ``verdicts`` of the run that would follow. A remote backend
is asked for its balance; nothing else leaves the machine: no DNS, no SMTP, no job."""

import os
import shutil
import tempfile
import time
from collections import Counter, deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from listhygiene.engine.providers import provider_of_domain
from listhygiene.pipeline.backends import Backend, LocalBackend, engine_settings, make_backend
from listhygiene.pipeline.pace import TimeEstimate, time_needed
from listhygiene.pipeline.verdict_memory import VERDICTS_VARIABLE, RunVerdicts, open_verdicts
from listhygiene.pipeline.worktables import MEMORY_VARIABLE, WorkMemoryError, connect
from listhygiene.verdicts import Freshness

if TYPE_CHECKING:
    import pyarrow as pa

    from listhygiene.engine import EngineSettings

__all__ = ["DISTINCT_BATCH", "Credits", "Estimate", "estimate_input"]

#: Distinct addresses checked at once once the input is read.
DISTINCT_BATCH = 100_000
#: DuckDB's tables: every distinct address, and those whose verdict the run would reuse.
_SEEN = "addresses"
_REUSED = "reused"
#: Batches read ahead of the store's lookups at most (each holds its new addresses).
_AHEAD = 2


@dataclass(frozen=True)
class Credits:
    """What a remote backend would charge, and what its key has."""

    #: Asked for before anything is submitted: one per distinct address to verify (unknown
    #: results are given back, so the run may spend fewer).
    needed: int
    balance: int

    @property
    def enough(self) -> bool:
        return self.balance >= self.needed

    def as_dict(self) -> dict[str, Any]:
        return {"needed": self.needed, "balance": self.balance, "enough": self.enough}


@dataclass(frozen=True)
class Estimate:
    """What cleaning the input would do; nothing was verified."""

    source: str
    kind: str
    email_column: str
    backend: str
    check_smtp: bool
    #: Input rows; those whose email cell is empty or a placeholder (never verified).
    rows: int
    empty: int
    #: Distinct addresses (as a run reads them); those the engine's syntax rules refuse.
    distinct: int
    invalid_syntax: int
    #: Distinct addresses whose fresh stored verdict the run would take; the rest, which the
    #: run would verify (``reused + to_verify == distinct``, as in the run's ``verdicts``).
    reused: int
    to_verify: int
    #: A remote backend's charge and balance; None for the local engine, which charges none.
    credits: Credits | None
    time: TimeEstimate
    #: The verdict store looked in (its URL without password); None without one.
    verdict_store: str | None
    bad_records: int
    #: How long the estimate itself took.
    elapsed_seconds: float

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` object."""
        return {
            "estimate": True,
            "input": {"name": self.source, "kind": self.kind, "email_column": self.email_column},
            "backend": self.backend,
            "check_smtp": self.check_smtp,
            "rows": self.rows,
            "empty_email": self.empty,
            "bad_records": self.bad_records,
            "distinct": self.distinct,
            "invalid_syntax": self.invalid_syntax,
            "reused": self.reused,
            "to_verify": self.to_verify,
            "verdict_store": self.verdict_store,
            "credits": None if self.credits is None else self.credits.as_dict(),
            "time": self.time.as_dict(),
            "elapsed_seconds": round(self.elapsed_seconds, 3),
        }


async def estimate_input(
    source: Any,
    *,
    email_column: str | None,
    table: str | None,
    query: str | None,
    encoding: str | None,
    backend: "str | Backend",
    check_smtp: bool | None,
    settings: "EngineSettings | None",
    engine_overrides: dict[str, Any],
    verdicts: Any,
    max_age: Any,
    fresh: bool,
) -> Estimate:
    """The work of :func:`listhygiene.estimate` (``pipeline/api.py`` checks its options)."""
    from listhygiene.pipeline.sources import open_source
    from listhygiene.pipeline.sources.columns import find_email_column

    started = time.perf_counter()
    opened = open_source(source, table=table, query=query, encoding=encoding)
    column = find_email_column(
        opened.schema, opened.sample(), email_column, source_name=opened.info.name
    )
    name, pacing, credits_left, default_smtp = await _backend(backend, settings, engine_overrides)
    smtp = default_smtp if check_smtp is None else bool(check_smtp)
    Freshness.of(max_age)  # a bad max age fails before anything is read
    # the store (SQLAlchemy's import, its migrations) opens while the input is read, on the
    # thread that looks its addresses up
    with ThreadPoolExecutor(1, thread_name_prefix="estimate-lookup") as lookups:
        opening = lookups.submit(open_verdicts, verdicts, max_age, fresh=fresh)
        try:
            counts = _count(
                opened, column, opening, lookups, store=_has_store(verdicts), check_smtp=smtp
            )
        finally:
            store = _close(opening)
    # what the store saw of a domain's MX hosts wins over what its name says
    providers = {d: counts.providers.get(d) or provider_of_domain(d) for d in counts.domains}
    to_verify = counts.distinct - counts.reused
    return Estimate(
        source=opened.info.name,
        kind=opened.info.kind,
        email_column=column,
        backend=name,
        check_smtp=smtp,
        rows=counts.rows,
        empty=counts.empty,
        distinct=counts.distinct,
        invalid_syntax=counts.invalid,
        reused=counts.reused,
        to_verify=to_verify,
        credits=None if credits_left is None else Credits(to_verify, credits_left),
        time=time_needed(counts.domains, providers, pacing, check_smtp=smtp),
        verdict_store=store,
        bad_records=len(opened.info.bad_records),
        elapsed_seconds=time.perf_counter() - started,
    )


def _has_store(verdicts: Any) -> bool:
    """Whether ``verdicts`` names a store (``open_verdicts``' reading: ``"none"`` or False,
    given or from ``LISTHYGIENE_VERDICTS``, is none), before it is opened."""
    url = verdicts if verdicts is not None else os.environ.get(VERDICTS_VARIABLE)
    return verdicts is not False and not (isinstance(url, str) and url.strip().lower() == "none")


def _close(opening: "Future[RunVerdicts | None]") -> str | None:
    """Close the store once opened; its URL without password (None: no store). An error
    opening it was raised where it was used, or the estimate's own error is the one raised."""
    try:
        memory = opening.result()
    except Exception:  # see the docstring
        return None
    if memory is None:
        return None
    memory.close()
    return memory.store.shown


async def _backend(
    backend: "str | Backend", settings: "EngineSettings | None", overrides: dict[str, Any]
) -> tuple[str, "EngineSettings", int | None, bool]:
    """(name, the settings that pace the time model, the balance or None, whether it probes
    mailboxes by default). The local engine is not started: its settings are enough. A remote
    service is asked for its key's balance (its errors are the run's: exit code 4)."""
    pacing = engine_settings(settings, overrides)
    if backend == "local":
        return "local", pacing, None, pacing.check_smtp
    built = make_backend(backend, settings=settings, engine_overrides=overrides)
    try:
        if isinstance(built, LocalBackend):
            pacing = built.engine.settings
        balance = await built.balance()
        return built.name, pacing, balance, built.default_check_smtp
    finally:
        await built.aclose()


@dataclass
class _Counts:
    rows: int = 0
    empty: int = 0
    distinct: int = 0
    invalid: int = 0
    reused: int = 0
    #: Addresses left to verify with a valid syntax, per domain.
    domains: Counter[str] = field(default_factory=Counter)
    #: Providers the verdict store remembers, per domain (``mx_provider``).
    providers: dict[str, str] = field(default_factory=dict)


def _count(
    source: Any,
    column: str,
    opening: "Future[RunVerdicts | None]",
    lookups: ThreadPoolExecutor,
    *,
    store: bool,
    check_smtp: bool,
) -> _Counts:
    """Read every row, then go through the distinct addresses (module docstring). Per batch
    three threads work in turn: this one reads and cleans, a writer keeps in DuckDB the
    addresses no batch before had, ``lookups`` asks the store about those (and keeps the ones
    it would reuse). At most :data:`_AHEAD` batches wait for their lookup. Without a ``store``
    every batch's addresses are kept as they come and made distinct once, at the end."""
    counts = _Counts()
    spill = Path(tempfile.mkdtemp(prefix="listhygiene-estimate-"))
    db = connect(spill)
    hits = db.cursor()  # the lookups' own connection: DuckDB's are one thread's each
    inserting: Future[pa.Array | None] | None = None
    waiting: deque[Future[None]] = deque()
    try:
        with _memory_guard(), ThreadPoolExecutor(1, thread_name_prefix="estimate") as writer:
            db.execute(f"CREATE TABLE {_SEEN} (address VARCHAR)")
            db.execute(f"CREATE TABLE {_REUSED} (address VARCHAR)")
            for batch in source.batches():
                addresses = _addresses(batch.column(column), counts)
                if inserting is not None:
                    inserting.result()
                inserting = writer.submit(_insert, db, addresses, new=store)
                if store:
                    waiting.append(
                        lookups.submit(_reused, opening, inserting, hits, counts, check_smtp)
                    )
                while len(waiting) > _AHEAD:
                    waiting.popleft().result()
            while waiting:
                waiting.popleft().result()
            if inserting is not None:
                inserting.result()
            distinct = f"(SELECT DISTINCT address FROM {_SEEN})" if not store else _SEEN
            query = (
                f"SELECT s.address, r.address IS NOT NULL FROM {distinct} s "
                f"LEFT JOIN {_REUSED} r ON s.address = r.address"
            )
            for found in db.sql(query).to_arrow_reader(DISTINCT_BATCH):
                _distinct(found.column(0), found.column(1), counts)
    finally:
        for future in (inserting, *waiting):
            if future is not None:
                future.cancel()
        hits.close()
        db.close()
        shutil.rmtree(spill, ignore_errors=True)
    return counts


def _addresses(cells: "pa.ChunkedArray | pa.Array", counts: _Counts) -> "pa.Array":
    """A batch's distinct addresses, cleaned as a run cleans them; its rows counted."""
    import pyarrow.compute as pc

    from listhygiene.email_cells import clean_cells

    cleaned = clean_cells(cells)
    counts.rows += len(cleaned)
    counts.empty += cleaned.null_count
    return pc.unique(cleaned.drop_null() if cleaned.null_count else cleaned)


def _insert(db: Any, addresses: "pa.Array", *, new: bool) -> "pa.Array | None":
    """Keep ``addresses`` in DuckDB; with ``new``, only those no batch before had, and return
    them (for the store's lookups)."""
    import pyarrow as pa

    db.register("staged", pa.table({"address": addresses}))
    try:
        if not new:
            db.execute(f"INSERT INTO {_SEEN} SELECT address FROM staged")
            return None
        kept = db.sql(
            f"INSERT INTO {_SEEN} SELECT b.address FROM staged b "
            f"ANTI JOIN {_SEEN} s ON b.address = s.address RETURNING address"
        ).to_arrow_table()
    finally:
        db.unregister("staged")
    return kept.column(0).combine_chunks() if kept.num_rows else pa.array([], pa.string())


def _reused(
    opening: "Future[RunVerdicts | None]",
    inserted: "Future[pa.Array | None]",
    hits: Any,
    counts: _Counts,
    check_smtp: bool,
) -> None:
    """Look up a batch's new addresses; keep in DuckDB (``hits``) those whose verdict the run
    would reuse, and in ``counts`` what the store knows of their domains' mail providers (with
    ``fresh`` too)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from listhygiene.results import KEY

    memory = opening.result()
    addresses = inserted.result()
    if memory is None or addresses is None or not len(addresses):
        return
    stored = memory.store.fetch(addresses)
    if not stored.num_rows:
        return
    known = (
        stored.select(["domain", "mx_provider"])
        .filter(pc.is_valid(stored.column("mx_provider")))
        .group_by(["domain", "mx_provider"])
        .aggregate([])
    )
    counts.providers.update(
        zip(known.column(0).to_pylist(), known.column(1).to_pylist(), strict=True)
    )
    if memory.fresh:
        return
    reusable = memory.freshness.reusable(stored, check_smtp=check_smtp, now=time.time())
    hits.register("hits", pa.table({"address": pc.filter(stored.column(KEY), reusable)}))
    try:
        hits.execute(f"INSERT INTO {_REUSED} SELECT address FROM hits")
    finally:
        hits.unregister("hits")


def _distinct(addresses: "pa.Array", reused: "pa.Array", counts: _Counts) -> None:
    """One batch of distinct addresses: syntax, reuse, the domains left to verify."""
    import pyarrow.compute as pc

    from listhygiene.engine.syntax import parse_columns

    parsed = parse_columns(addresses)
    valid = parsed["valid"]
    counts.distinct += len(addresses)
    counts.invalid += len(addresses) - (pc.sum(valid).as_py() or 0)
    counts.reused += pc.sum(reused).as_py() or 0
    left = pc.and_(valid, pc.invert(reused))
    domains = pc.value_counts(pc.filter(parsed["domain"], left))
    counts.domains.update(
        dict(
            zip(
                domains.field("values").to_pylist(),
                domains.field("counts").to_pylist(),
                strict=True,
            )
        )
    )


class _memory_guard:
    """DuckDB's out-of-memory as one line naming ``LISTHYGIENE_WORK_MEMORY``."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: Any, _tb: Any) -> None:
        import duckdb

        if isinstance(exc, duckdb.OutOfMemoryException):
            raise WorkMemoryError(
                f"out of memory while counting the distinct addresses: set {MEMORY_VARIABLE} "
                "higher (e.g. 1GB)"
            ) from None
