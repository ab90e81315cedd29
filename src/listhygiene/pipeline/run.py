"""Cleaning an address table: read, verify, join back, write per status, check, report.

1. **Read** the input in chunks; each row gets its row number and its cleaned address; the rows
   are staged as Parquet in the working folder (the input may be larger than memory, or a
   database that should be read once).
2. **Verify** each distinct address once, through a backend, as jobs whose ids are recorded
   before waiting; results are saved as they come. A resumed run verifies only what is missing;
   a second pass can verify again the addresses that ended unknown for a temporary reason.
3. **Join** the results back onto every row (vectorised), and write one Parquet file per status,
   all seven always, each row in exactly one.
4. **Check** what was written with great-expectations, and write ``summary.json`` and
   ``report.html``. Only then do the files move into place.
"""

import asyncio
import dataclasses
import logging
import math
import os
import time
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from listhygiene._version import __version__
from listhygiene.engine import EngineSettings
from listhygiene.errors import BackendError, PipelineError, QualityError, UnreachableError
from listhygiene.pipeline.backends import (
    KEY,
    Backend,
    InsufficientCredits,
    JobFailed,
    JobRef,
    make_backend,
)
from listhygiene.pipeline.outputs import SUMMARY, OutputFolder
from listhygiene.pipeline.verdict_memory import CHANGED, RunVerdicts, open_verdicts
from listhygiene.pipeline.workdir import ADDRESS, ROW, VERIFIED_AT, WorkDir
from listhygiene.pipeline.worktables import PENDING, WorkTables
from listhygiene.results import FORM_A_FIELDS, VerificationResult, arrow_schema
from listhygiene.statuses import TEMPORARY_REASONS, Facts, Status

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from listhygiene.verdicts import VerdictStore

log = logging.getLogger(__name__)

__all__ = [
    "STATUSES",
    "BackendError",
    "CleanResult",
    "PipelineError",
    "QualityError",
    "UnreachableError",
    "aclean",
    "asubmit",
    "clean",
    "submit",
]

#: Every status gets its file, in this order.
STATUSES: tuple[str, ...] = tuple(s.value for s in Status)
#: Called with (phase, done, total) as the run goes; total 0 when unknown.
Progress = Callable[[str, int, int], None]
#: Bounds on what one step holds (docs/pipeline.md, "Memory"): addresses looked up in the verdict
#: store at once, addresses in one job of a backend whose jobs live in this process, and rows of
#: one batch of the join.
_REUSE_BATCH = 100_000
_LOCAL_JOB = 200_000
_JOIN_BATCH = 65_536


@dataclasses.dataclass
class CleanResult:
    """What a run produced: the summary, and a DataFrame per status on demand."""

    out: str
    summary: dict[str, Any]
    _frames: dict[str, "pd.DataFrame"] = dataclasses.field(default_factory=dict, repr=False)

    @property
    def files(self) -> dict[str, str]:
        return {s: f"{self.out.rstrip('/')}/{s}.parquet" for s in STATUSES}

    @property
    def report(self) -> str:
        return f"{self.out.rstrip('/')}/report.html"

    @property
    def counts(self) -> dict[str, int]:
        return dict(self.summary["rows"]["by_status"])

    @property
    def quality(self) -> dict[str, Any]:
        """The data-quality checks: ``passed``, ``mode`` and each check's result."""
        return dict(self.summary["quality"])

    @property
    def passed(self) -> bool:
        return bool(self.summary["quality"]["passed"])

    def frame(self, status: str) -> "pd.DataFrame":
        """The rows of one status as a DataFrame (read on first use)."""
        if status not in STATUSES:
            raise KeyError(f"{status!r} is not a status; one of {', '.join(STATUSES)}")
        if status not in self._frames:
            folder = OutputFolder(self.out)
            import pyarrow.parquet as pq

            table = pq.read_table(folder.final(f"{status}.parquet"), filesystem=folder.fs)
            self._frames[status] = table.to_pandas()
        return self._frames[status]

    @property
    def frames(self) -> dict[str, "pd.DataFrame"]:
        return {s: self.frame(s) for s in STATUSES}

    def __getitem__(self, status: str) -> "pd.DataFrame":
        return self.frame(status)

    def __repr__(self) -> str:
        counts = ", ".join(f"{s}={n}" for s, n in self.counts.items() if n)
        return f"<CleanResult {self.out}: {self.summary['rows']['total']} rows ({counts})>"

    # -- a temporary output folder (clean() without one): it lives as long as the result --------

    def own_folder(self) -> None:
        """Remove :attr:`out` when this result is closed or garbage-collected (or at exit):
        the frames are read from its files on demand, so it must outlive nothing but them."""
        self._finalizer = weakref.finalize(self, _remove_tree, self.out)

    def close(self) -> None:
        """Remove a temporary output folder now; frames already read stay usable."""
        finalizer = getattr(self, "_finalizer", None)
        if finalizer is not None:
            finalizer()

    def __enter__(self) -> "CleanResult":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def clean(source: Any, out: str | os.PathLike[str] | None = None, **options: Any) -> CleanResult:
    """Clean an address table; see :func:`aclean` for the options. Blocking, for scripts and
    notebooks (where an event loop may already run: the work then runs on a worker thread)."""
    from listhygiene.engine.sync import _run

    return _run(aclean(source, out, **options))


async def aclean(
    source: Any,
    out: str | os.PathLike[str] | None = None,
    *,
    email_column: str | None = None,
    table: str | None = None,
    query: str | None = None,
    encoding: str | None = None,
    backend: str | Backend = "local",
    check_smtp: bool | None = None,
    settings: EngineSettings | None = None,
    quality: str = "fail",
    retry_unknown_after: float | None = None,
    accept_unreachable: bool = False,
    verdicts: "str | VerdictStore | None" = None,
    max_age: "str | float | Mapping[str, float] | None" = None,
    fresh: bool = False,
    progress: Progress | None = None,
    **engine_overrides: Any,
) -> CleanResult:
    """Clean ``source`` (a file path, a SQLAlchemy URL with ``table`` or ``query``, a pandas
    DataFrame or an Arrow table) into ``out`` (a folder or filesystem URL; when None, a
    temporary folder that lives as long as the result: see :meth:`CleanResult.close`).

    ``check_smtp`` defaults to the engine settings' (``LISTHYGIENE_CHECK_SMTP``, on by default).
    ``quality="warn"`` publishes the outputs even when a data-quality check fails (the summary
    says so); ``retry_unknown_after`` (seconds) verifies again, after that delay, the addresses
    that ended unknown for a temporary reason (greylisting, rate limits, time-outs).

    When most domains cannot be reached on port 25 (the run's health problem) the run raises
    :class:`UnreachableError` and publishes nothing, unless ``accept_unreachable`` is true.

    ``verdicts``: the verdict store whose fresh verdicts are reused and which keeps every new one
    (a :class:`~listhygiene.verdicts.VerdictStore`, a SQLAlchemy URL, or ``"none"``; by default
    ``LISTHYGIENE_VERDICTS``, else ``verdicts.sqlite`` in the user's cache directory);
    ``max_age`` how old a reused verdict may be (``"30d"``, ``"valid=14d,risky=1d"``, seconds, or
    a mapping of status to seconds); ``fresh`` verifies everything again (and updates the store).
    """
    if quality not in ("fail", "warn"):
        raise ValueError("quality must be 'fail' or 'warn'")
    temporary = out is None
    if out is None:  # a folder of the result's own, removed with it (docs/pipeline.md)
        import tempfile

        out = tempfile.mkdtemp(prefix="listhygiene-")
    run = _make_run(
        source,
        out,
        {
            "email_column": email_column,
            "table": table,
            "query": query,
            "encoding": encoding,
            "backend": backend,
            "check_smtp": check_smtp,
            "settings": settings,
            "quality": quality,
            "retry_unknown_after": retry_unknown_after,
            "accept_unreachable": accept_unreachable,
            "verdicts": verdicts,
            "max_age": max_age,
            "fresh": fresh,
            "progress": progress,
            **engine_overrides,
        },
    )
    try:
        result = await run.execute()
    except BaseException:
        if temporary:
            _remove_tree(os.fspath(out))
        raise
    if temporary:
        result.own_folder()
    return result


def submit(source: Any, out: str | os.PathLike[str], **options: Any) -> list[JobRef]:
    """Blocking :func:`asubmit`."""
    from listhygiene.engine.sync import _run

    return _run(asubmit(source, out, **options))


async def asubmit(source: Any, out: str | os.PathLike[str], **options: Any) -> list[JobRef]:
    """Read ``source`` and submit its addresses to a resumable (remote) backend, without waiting:
    the jobs the run waits on, recorded in ``out``'s work folder. :func:`aclean` with the same
    arguments later reads their results instead of submitting again (an orchestrator defers in
    between: Airflow's deferrable operator, a Dagster sensor).

    Jobs already recorded and not yet read are returned as they are, and nothing more is
    submitted. A backend whose jobs live in this process (the local engine) submits nothing:
    the list is empty, and :func:`aclean` does all the work.
    """
    options.setdefault("progress", None)
    run = _make_run(source, out, options)
    return await run.submit_only()


def _make_run(source: Any, out: str | os.PathLike[str], options: dict[str, Any]) -> "_Run":
    known = {
        "email_column",
        "table",
        "query",
        "encoding",
        "backend",
        "check_smtp",
        "settings",
        "quality",
        "retry_unknown_after",
        "accept_unreachable",
        "verdicts",
        "max_age",
        "fresh",
        "progress",
    }
    engine_overrides = {k: v for k, v in options.items() if k not in known}
    return _Run(
        source=source,
        out=_absolute(out),
        email_column=options.get("email_column"),
        table=options.get("table"),
        query=options.get("query"),
        encoding=options.get("encoding"),
        backend=options.get("backend", "local"),
        check_smtp=options.get("check_smtp"),
        settings=options.get("settings"),
        engine_overrides=engine_overrides,
        quality_mode=options.get("quality", "fail"),
        retry_unknown_after=options.get("retry_unknown_after"),
        accept_unreachable=bool(options.get("accept_unreachable", False)),
        verdicts_option=options.get("verdicts"),
        max_age=options.get("max_age"),
        fresh=bool(options.get("fresh", False)),
        progress=options.get("progress") or (lambda phase, done, total: None),
    )


@dataclasses.dataclass
class _Run:
    source: Any
    out: str
    email_column: str | None
    table: str | None
    query: str | None
    encoding: str | None
    backend: str | Backend
    check_smtp: bool | None
    settings: EngineSettings | None
    engine_overrides: dict[str, Any]
    quality_mode: str
    retry_unknown_after: float | None
    accept_unreachable: bool
    verdicts_option: Any
    max_age: Any
    fresh: bool
    progress: Progress
    #: The verdict store as this run uses it (None: no store), open while the run runs.
    memory: "RunVerdicts | None" = None
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    counters: Counter[str] = dataclasses.field(default_factory=Counter)
    #: Broken input records kept as rows (from the source, or the manifest on a resume).
    bad_records: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    async def submit_only(self) -> list[JobRef]:
        from listhygiene.pipeline.columns import find_email_column
        from listhygiene.pipeline.sources import open_source

        source = open_source(
            self.source, table=self.table, query=self.query, encoding=self.encoding
        )
        column = find_email_column(
            source.schema, source.sample(), self.email_column, source_name=source.info.name
        )
        OutputFolder(self.out).check_writable()
        backend = self._backend()
        try:
            if not backend.resumable:
                return []
            self.memory = open_verdicts(self.verdicts_option, self.max_age, fresh=self.fresh)
            if self.check_smtp is None:
                self.check_smtp = backend.default_check_smtp
            work = WorkDir.for_output(self.out)
            work.open(self._fingerprint(source.info.name, column, backend))
            with WorkTables(work) as tables:
                _, distinct = self._read(source, column, work, tables)
                work.set_stage("verifying")
                waiting = [j for j in work.open_jobs() if j.backend == backend.name]
                if waiting:
                    return waiting
                return await self._submit(backend, work, tables, distinct)
        finally:
            await backend.aclose()
            if self.memory is not None:
                self.memory.close()

    async def execute(self) -> CleanResult:
        from listhygiene.pipeline.columns import find_email_column
        from listhygiene.pipeline.sources import open_source

        started_at = datetime.now(UTC)
        started = time.perf_counter()
        source = open_source(
            self.source, table=self.table, query=self.query, encoding=self.encoding
        )
        info = source.info
        column = find_email_column(
            source.schema, source.sample(), self.email_column, source_name=info.name
        )
        folder = OutputFolder(self.out)
        folder.check_writable()
        backend = self._backend()
        self.memory = open_verdicts(self.verdicts_option, self.max_age, fresh=self.fresh)
        if self.check_smtp is None:
            self.check_smtp = backend.default_check_smtp
        work = WorkDir.for_output(self.out)
        resumed = work.open(self._fingerprint(info.name, column, backend))
        if resumed:
            log.info("resuming the run in %s (stage %s)", work.path, work.stage)
        tables = WorkTables(work)
        try:
            with _timed(self.timings, "read"):
                rows, distinct = self._read(source, column, work, tables)
            with _timed(self.timings, "verify"):
                await self._verify(backend, work, tables, distinct)
                if self.retry_unknown_after is not None:
                    await self._second_pass(backend, work, tables)
            health = _run_health(work.manifest.get("health"), backend.health)
            work.set_stage("writing", health=health)
            self._check_health(health)
            with _timed(self.timings, "write"):
                written = self._write(folder, work, tables, distinct)
            with _timed(self.timings, "quality"):
                report = self._check(folder, written, rows)
            summary = self._summary(
                info,
                column,
                backend,
                folder,
                written,
                report,
                rows,
                distinct,
                started_at,
                started,
                resumed,
                health,
            )
            summary["verdicts"] = (
                self.memory.counts(work, distinct, written["changed"])
                if self.memory is not None
                else {"reused": 0, "verified": distinct, "changed": 0}
            )
            if self.memory is not None:
                summary["verdict_store"] = self.memory.report(work, written["transitions"])
                summary["verdict_store"]["changed_file"] = {
                    "path": CHANGED,
                    "rows": written["changed_rows"],
                }
            self._publish(folder, summary, report, changed=self.memory is not None)
        except BaseException:
            folder.discard()
            raise
        finally:
            tables.close()
            await backend.aclose()
            if self.memory is not None:
                self.memory.close()
        work.remove()  # published: the work state goes (docs/pipeline.md, "Resume")
        return CleanResult(self.out, summary)

    # -- set-up ----------------------------------------------------------------------------------

    def _backend(self) -> Backend:
        # One factory for every interface (docs/backends.md).
        return make_backend(
            self.backend, settings=self.settings, engine_overrides=self.engine_overrides
        )

    def _fingerprint(self, name: str, column: str, backend: Backend) -> dict[str, Any]:
        identity: dict[str, Any] = {"name": name, "table": self.table, "query": self.query}
        if isinstance(self.source, (str, os.PathLike)) and Path(self.source).is_file():
            stat = Path(self.source).stat()
            identity.update(size=stat.st_size, mtime_ns=stat.st_mtime_ns)
        elif not isinstance(self.source, (str, os.PathLike)):
            identity["content"] = _content_hash(self.source)
        return {
            "input": identity,
            "email_column": column,
            "backend": backend.name,
            "settings": _jsonable(backend.fingerprint()),
            "check_smtp": self.check_smtp,
            "version": __version__,
        }

    # -- read ------------------------------------------------------------------------------------

    def _read(self, source: Any, column: str, work: WorkDir, tables: WorkTables) -> tuple[int, int]:
        """Stage every row with its row number and cleaned address, batch by batch; then the
        distinct addresses, out of core (docs/pipeline.md, "Memory"). (rows, distinct)."""
        import numpy as np
        import pyarrow as pa

        from listhygiene.pipeline.prepare import clean_cells
        from listhygiene.pipeline.sources import SourceError

        if work.stage not in ("new", "reading"):
            self.bad_records = list(work.manifest.get("bad_records", []))
            return int(work.manifest["rows"]), tables.distinct()
        work.clear_rows()
        work.set_stage("reading")
        total = 0
        try:
            for index, batch in enumerate(source.batches()):
                chunk = pa.Table.from_batches([batch])
                cleaned = clean_cells(chunk.column(column))
                numbers = pa.array(np.arange(total + 1, total + len(chunk) + 1, dtype=np.int64))
                staged = chunk.append_column(ROW, numbers).append_column(ADDRESS, cleaned)
                work.write_rows(index, staged)
                total += len(chunk)
                self.progress("read", total, 0)
        except SourceError:
            work.remove()  # a half-read input is refused, not resumed: nothing is left
            raise
        distinct = tables.distinct()
        self.bad_records = [dataclasses.asdict(b) for b in source.info.bad_records]
        work.set_stage(
            "read",
            rows=total,
            bad_records=self.bad_records,
            source={
                "kind": source.info.kind,
                "encoding": source.info.encoding,
                "delimiter": source.info.delimiter,
            },
        )
        return total, distinct

    # -- verify ----------------------------------------------------------------------------------

    async def _verify(
        self, backend: Backend, work: WorkDir, tables: WorkTables, distinct: int
    ) -> None:
        work.set_stage("verifying")
        for job in work.open_jobs():
            if backend.resumable and job.backend == backend.name:
                log.info(
                    "collecting the results of job %s, submitted before the restart", job.job_id
                )
                await self._collect(backend, work, job, distinct)
            work.finish_job(job)
        jobs = await self._submit(backend, work, tables, distinct)
        for job in jobs:
            await self._collect(backend, work, job, distinct)
            work.finish_job(job)

    async def _submit(
        self, backend: Backend, work: WorkDir, tables: WorkTables, distinct: int
    ) -> list[JobRef]:
        """Submit every address without a result, in jobs of the backend's size, all before
        waiting on any (a remote service works on them together), each recorded as accepted;
        the jobs to wait on. A backend whose jobs live in this process verifies each job as it
        is submitted, so that no more than one job's addresses are held at once."""
        pending = tables.pending()
        if self.memory is not None and pending:
            for addresses in tables.addresses(PENDING, _REUSE_BATCH):
                self.memory.reuse(work, addresses, check_smtp=bool(self.check_smtp))
            pending = tables.pending()  # what the store did not answer
        self.counters["reused"] = distinct - pending
        self.counters["verified"] = pending
        if pending:
            try:
                await backend.ensure_credits(pending)
            except InsufficientCredits as exc:
                raise BackendError(str(exc)) from None
        size = backend.max_job_size or (_LOCAL_JOB if not backend.resumable else max(1, pending))
        jobs = []
        for addresses in tables.addresses(PENDING, size) if pending else ():
            job = await backend.submit(addresses, check_smtp=bool(self.check_smtp))
            work.add_job(job)
            if backend.resumable:
                jobs.append(job)
            else:
                await self._collect(backend, work, job, distinct)
                work.finish_job(job)
        return jobs

    async def _collect(self, backend: Backend, work: WorkDir, job: Any, total: int) -> None:
        started: list[JobRef] = []  # jobs the backend submitted while collecting (form A's slow)
        try:
            async for table in backend.results(job):
                if isinstance(table, JobRef):
                    work.add_job(table)  # recorded: a rerun reads it instead of paying again
                    started.append(table)
                    continue
                work.write_results(table)
                if self.memory is not None:
                    await asyncio.to_thread(self.memory.save, table, backend=backend.name)
                self.counters["results"] += len(table)
                self.progress(
                    "verify",
                    min(total, self.counters["reused"] + self.counters["results"]),
                    total,
                )
        except JobFailed as exc:
            for done in (job, *started):
                work.finish_job(done)  # a rerun submits what it lacked, not waiting on it again
            raise BackendError(f"{exc}; run again to verify its addresses anew") from None
        for done in started:
            work.finish_job(done)

    async def _second_pass(self, backend: Backend, work: WorkDir, tables: WorkTables) -> None:
        temporary = ", ".join(f"'{r.value}'" for r in sorted(TEMPORARY_REASONS))
        again = tables.latest_where(
            f"status = '{Status.UNKNOWN.value}' AND reason IN ({temporary})",
            f"{KEY}, {VERIFIED_AT}",
        )
        if not again.num_rows:
            return
        import pyarrow.compute as pc

        due = pc.max(again.column(VERIFIED_AT)).as_py() + float(self.retry_unknown_after or 0)
        wait = max(0.0, due - time.time())
        log.info(
            "%d addresses ended unknown for a temporary reason; verifying them again in %.0f s",
            again.num_rows,
            wait,
        )
        self.progress("wait", 0, math.ceil(wait))
        await asyncio.sleep(wait)
        keys = again.column(KEY).combine_chunks()
        job = await backend.submit(keys, check_smtp=bool(self.check_smtp))
        work.add_job(job)
        before = self.counters["results"]
        await self._collect(backend, work, job, len(keys))
        work.finish_job(job)
        self.counters["retried"] = self.counters["results"] - before

    # -- write -----------------------------------------------------------------------------------

    def _write(
        self, folder: OutputFolder, work: WorkDir, tables: WorkTables, distinct: int
    ) -> dict[str, Any]:
        """Join the results back onto every row, batch by batch in row order, and append each
        batch's rows to the file of their status (docs/pipeline.md, "Memory")."""
        import pyarrow as pa
        import pyarrow.compute as pc

        unanswered, example = tables.unanswered()
        if unanswered:
            raise PipelineError(
                f"the backend returned no result for {unanswered} addresses (e.g. "
                f"{example!r}); run again with the same --out to resume"
            )
        result_schema = arrow_schema()
        previous = self.memory.previous_folder(work) if self.memory is not None else None
        # one credit per distinct address verified (unknown free), whatever its row count
        credits = tables.credits()
        joined = tables.joined(previous, _JOIN_BATCH)
        stream = _Rebatcher(joined.batches)
        blank = _blank_result()
        writers: dict[str, Any] = {}
        written: dict[str, Any] = {
            "rows": {s: [] for s in STATUSES},
            "reasons": Counter(),
            "domains": Counter(),
            "credits": credits,
            "blank": 0,
            "changed_rows": 0,
            "changed": 0,
            "transitions": {},
            "schema": None,
        }
        for part in work.rows():
            if not part.num_rows:
                continue
            part = part.combine_chunks()
            inputs = part.drop_columns([ROW, ADDRESS])
            found = stream.take(len(part))
            if not pc.all(pc.equal(found.column(ROW), part.column(ROW))).as_py():
                raise PipelineError("the joined results are out of step with the rows")
            addresses = _flat(part.column(ADDRESS))
            empty = _flat(pc.is_null(addresses))
            profile = joined.profiles.take(_flat(found.column("profile")))
            columns = {
                name: _flat(pc.if_else(empty, blank[name], _flat(profile.column(name))))
                for name in profile.column_names
            }
            email = pc.coalesce(_flat(found.column("email")), addresses)
            columns["email"] = _flat(pc.if_else(empty, blank["email"], email))
            columns["response_time"] = _flat(
                pc.if_else(empty, blank["response_time"], _flat(found.column("response_time")))
            )
            joined_part = _join(inputs, columns)
            if written["schema"] is None:
                written["schema"] = joined_part.schema
                for status in STATUSES:
                    writers[status] = folder.writer(f"{status}.parquet", joined_part.schema)
            joined_part = joined_part.cast(written["schema"])
            status = columns["status"]
            for name in STATUSES:
                mask = pc.equal(status, name)
                count = pc.sum(mask).as_py() or 0
                if count:
                    writers[name].write_table(joined_part.filter(mask))
                    written["rows"][name].append(_flat(pc.filter(part.column(ROW), mask)))
            if self.memory is not None:
                written["changed_rows"] += self._write_changed(
                    folder, writers, joined_part, found, written["schema"]
                )
            written["blank"] += pc.sum(empty).as_py() or 0
            for reason, n in _value_counts(columns["reason"]).items():
                written["reasons"][reason] += n
            for (domain, status_name), n in _pair_counts(columns["domain"], status).items():
                written["domains"][(domain, status_name)] += n
        if not writers:  # no rows at all: empty files with the input's columns
            schema = _join(
                _empty_inputs(work),
                {n: pa.array([], result_schema.field(n).type) for n in FORM_A_FIELDS},
            ).schema
            written["schema"] = schema
            for status in STATUSES:
                writers[status] = folder.writer(f"{status}.parquet", schema)
        stream.finish()
        if self.memory is not None:
            if CHANGED not in writers:
                writers[CHANGED] = folder.writer(CHANGED, _changed_schema(written["schema"]))
            written["transitions"] = tables.transitions() if distinct else {}
            written["changed"] = sum(written["transitions"].values())
        for writer in writers.values():
            writer.close()
        return written

    @staticmethod
    def _write_changed(
        folder: OutputFolder,
        writers: dict[str, Any],
        joined: "pa.Table",
        found: "pa.Table",
        schema: "pa.Schema",
    ) -> int:
        """The rows of ``joined`` whose address changed status, with its previous status and
        when it was found; how many."""
        import pyarrow as pa
        import pyarrow.compute as pc

        before = _flat(found.column("previous_status"))
        mask = pc.is_valid(before)
        if not pc.any(mask).as_py():
            return 0
        rows = joined.filter(mask)
        seconds = pc.filter(_flat(found.column("previous_checked_at")), mask)
        when = pc.cast(
            pc.round(pc.multiply(seconds, 1_000_000)).cast(pa.int64()),
            pa.timestamp("us", tz="UTC"),
        )
        rows = rows.append_column("previous_status", pc.filter(before, mask))
        rows = rows.append_column("previous_checked_at", when)
        if CHANGED not in writers:
            writers[CHANGED] = folder.writer(CHANGED, _changed_schema(schema))
        writers[CHANGED].write_table(rows.cast(_changed_schema(schema)))
        return rows.num_rows

    # -- check -----------------------------------------------------------------------------------

    def _check(self, folder: OutputFolder, written: Mapping[str, Any], rows: int) -> Any:
        import pyarrow as pa
        import pyarrow.parquet as pq

        from listhygiene.pipeline.quality import run_quality_checks

        frames = []
        file_rows = {}
        names = _result_names(written["schema"])
        for status in STATUSES:
            path = folder.staged(f"{status}.parquet")
            file_rows[status] = pq.read_metadata(path, filesystem=folder.fs).num_rows
            content = pq.read_table(
                path,
                filesystem=folder.fs,
                columns=[names["status"], names["score"], names["email"]],
            )
            numbers = written["rows"][status]
            row_ids = pa.concat_arrays(numbers) if numbers else pa.array([], pa.int64())
            frames.append(
                pa.table(
                    {
                        "_row": row_ids
                        if len(row_ids) == len(content)
                        else _mismatch(row_ids, content),
                        "_file": pa.array([status] * len(content), pa.string()),
                        "status": content.column(0),
                        "score": content.column(1),
                        "email": content.column(2),
                    }
                )
            )
        summary_rows = {s: sum(len(a) for a in written["rows"][s]) for s in STATUSES}
        return run_quality_checks(
            pa.concat_tables(frames),
            expected_rows=rows,
            file_rows=file_rows,
            summary_rows=summary_rows,
        )

    # -- summary, report, publish ----------------------------------------------------------------

    def _summary(
        self,
        info: Any,
        column: str,
        backend: Backend,
        folder: OutputFolder,
        written: Mapping[str, Any],
        report: Any,
        rows: int,
        distinct: int,
        started_at: datetime,
        started: float,
        resumed: bool,
        health: Mapping[str, Any],
    ) -> dict[str, Any]:
        by_status = {s: sum(len(a) for a in written["rows"][s]) for s in STATUSES}
        per_domain: dict[str, Counter[str]] = {}
        for (domain, status), n in written["domains"].items():
            if domain:
                per_domain.setdefault(domain, Counter())[status] += n
        top = sorted(per_domain.items(), key=lambda kv: (-sum(kv[1].values()), kv[0]))[:15]
        self.timings["total"] = time.perf_counter() - started
        return {
            "listhygiene_version": __version__,
            "input": {
                "name": info.name,
                "kind": info.kind,
                "encoding": info.encoding,
                "delimiter": info.delimiter,
                "email_column": column,
                "rows": rows,
                "bad_records": self.bad_records,
            },
            "output": {
                "folder": self.out,
                "files": {s: {"path": f"{s}.parquet", "rows": by_status[s]} for s in STATUSES},
            },
            "backend": {"name": backend.name, "check_smtp": self.check_smtp},
            "rows": {
                "total": rows,
                "by_status": by_status,
                "by_reason": dict(sorted(written["reasons"].items())),
                "empty_email": written["blank"],
            },
            "addresses": {
                "distinct": distinct,
                "duplicate_rows": rows - written["blank"] - distinct,
                "verified": self.counters["verified"],
                "reused": self.counters["reused"],
                "retried": self.counters["retried"],
                "resumed": resumed,
            },
            "credits": {"used": int(written["credits"]), **_uncertain_credits(backend)},
            "top_domains": [
                {"domain": d, "rows": sum(c.values()), "by_status": dict(c)} for d, c in top
            ],
            "timings": {
                "started_at": started_at.isoformat().replace("+00:00", "Z"),
                "finished_at": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
                "seconds": {k: round(v, 3) for k, v in self.timings.items()},
            },
            "health": {**health, "accepted": bool(health.get("problem"))},
            "quality": {**report.as_dict(), "mode": self.quality_mode},
        }

    def _check_health(self, health: Mapping[str, Any]) -> None:
        """Refuse to publish a run that could not verify because of where it ran."""
        problem = health.get("problem")
        if problem and not self.accept_unreachable:
            raise UnreachableError(
                f"{problem}; nothing was published (the results are kept: accept them to "
                "publish without probing again)",
                health,
            )
        if problem:
            log.warning("publishing although %s", problem)

    def _publish(
        self, folder: OutputFolder, summary: dict[str, Any], report: Any, *, changed: bool = False
    ) -> None:
        import json

        from listhygiene.pipeline.report import render_report

        if not report.passed and self.quality_mode == "fail":
            failed = [c for c in report.checks if not c.passed]
            details = "; ".join(f"{c.name}: {c.details}" for c in failed)
            raise QualityError(
                f"data-quality checks failed, nothing was published: {details}", summary["quality"]
            )
        folder.write_text("report.html", render_report(summary))
        folder.write_text(SUMMARY, json.dumps(summary, indent=2, ensure_ascii=False))
        extra = [CHANGED] if changed else []
        folder.publish([f"{s}.parquet" for s in STATUSES] + extra + ["report.html", SUMMARY])


# -- helpers -------------------------------------------------------------------------------------


class _Rebatcher:
    """The rows of a stream of record batches, taken so many at a time: the join's batches
    need not line up with the staged parts."""

    def __init__(self, batches: "Iterator[pa.RecordBatch]") -> None:
        self._batches = batches
        self._held: list[pa.RecordBatch] = []
        self._count = 0

    def take(self, rows: int) -> "pa.Table":
        import pyarrow as pa

        while self._count < rows:
            batch = next(self._batches, None)
            if batch is None:
                raise PipelineError("the joined results ended before the rows")
            if len(batch):
                self._held.append(batch)
                self._count += len(batch)
        table = pa.Table.from_batches(self._held).combine_chunks()
        rest = table.slice(rows)
        self._held = rest.to_batches() if rest.num_rows else []
        self._count = rest.num_rows
        return table.slice(0, rows)

    def finish(self) -> None:
        """Read the stream to its end (its connection serves the next query only then); no
        row may be left."""
        left = self._count + sum(len(batch) for batch in self._batches)
        if left:
            raise PipelineError(f"the joined results have {left} rows more than the input")


class _timed:
    def __init__(self, timings: dict[str, float], name: str) -> None:
        self.timings, self.name = timings, name

    def __enter__(self) -> None:
        self.started = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.timings[self.name] = self.timings.get(self.name, 0.0) + (
            time.perf_counter() - self.started
        )


def _changed_schema(rows: "pa.Schema") -> "pa.Schema":
    """``changed.parquet``: the rows' columns, then the previous status and when it was found."""
    import pyarrow as pa

    return rows.append(pa.field("previous_status", pa.string())).append(
        pa.field("previous_checked_at", pa.timestamp("us", tz="UTC"))
    )


def _uncertain_credits(backend: Backend) -> dict[str, int]:
    """``{"uncertain": N}`` when requests the backend sent may have been charged without their
    answer arriving (form A batches that timed out: docs/backends.md); else nothing."""
    uncertain = int(getattr(backend, "uncertain_credits", 0) or 0)
    return {"uncertain": uncertain} if uncertain else {}


def _run_health(
    stored: Mapping[str, Any] | None, current: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The health of the whole run: what earlier attempts of a resumed run measured, plus this
    attempt's (a resumed run that probes nothing must not forget that the first one could not
    reach port 25)."""
    from listhygiene.engine.health import RunHealth

    counts = ("domains_probed", "domains_reached", "domains_unreachable", "domains_blocked")
    if not stored and not current:
        return {}
    health = RunHealth(
        **{
            name: int((stored or {}).get(name, 0)) + int((current or {}).get(name, 0))
            for name in counts
        }
    )
    return health.as_dict()


def _remove_tree(path: str) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def _absolute(out: str | os.PathLike[str]) -> str:
    """A local folder as an absolute path (the result stays usable after a chdir); URLs as
    given."""
    text = os.fspath(out)
    return text if "://" in text else os.path.abspath(text)


def _jsonable(values: Mapping[str, Any]) -> dict[str, Any]:
    """As stored in the manifest's JSON, so that a loaded fingerprint compares equal."""
    import json

    return json.loads(json.dumps(dict(values), default=str))


def _flat(values: "pa.Array | pa.ChunkedArray") -> "pa.Array":
    import pyarrow as pa

    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks()
    return values


def _blank_result() -> dict[str, Any]:
    """The result columns of a row whose email cell is empty: invalid, not verified, free."""
    import pyarrow as pa

    row = VerificationResult.from_facts("", Facts(syntax_valid=False)).to_row()
    row["credits_used"] = 0
    schema = arrow_schema()
    return {name: pa.scalar(row[name], schema.field(name).type) for name in FORM_A_FIELDS}


def _join(inputs: "pa.Table", results: Mapping[str, "pa.Array"]) -> "pa.Table":
    """The input's columns, then the result columns (renamed ``result_<name>`` on a clash)."""
    table = inputs
    taken = set(inputs.column_names)
    for name in FORM_A_FIELDS:
        label = f"result_{name}" if name in taken else name
        table = table.append_column(label, results[name])
    return table


def _result_names(schema: "pa.Schema") -> dict[str, str]:
    names = schema.names
    return {n: (f"result_{n}" if f"result_{n}" in names else n) for n in FORM_A_FIELDS}


def _empty_inputs(work: WorkDir) -> "pa.Table":
    import pyarrow.parquet as pq

    parts = sorted((work.path / "rows").glob("part-*.parquet"))
    if parts:
        return pq.read_table(parts[0]).drop_columns([ROW, ADDRESS]).slice(0, 0)
    import pyarrow as pa

    return pa.table({})


def _mismatch(row_ids: "pa.Array", content: "pa.Table") -> "pa.Array":
    """Row numbers for a file whose length differs from what was written: the check fails."""
    import pyarrow as pa

    ids = row_ids.to_pylist()[: len(content)]
    return pa.array(ids + [None] * (len(content) - len(ids)), pa.int64())


def _value_counts(values: "pa.Array") -> dict[str, int]:
    import pyarrow.compute as pc

    counts = pc.value_counts(values)
    return {v["values"]: v["counts"] for v in counts.to_pylist() if v["values"] is not None}


def _pair_counts(left: "pa.Array", right: "pa.Array") -> dict[tuple[str, str], int]:
    import pyarrow as pa

    table = pa.table({"a": left, "b": right}).group_by(["a", "b"]).aggregate([([], "count_all")])
    return {
        (a, b): n
        for a, b, n in zip(
            table.column("a").to_pylist(),
            table.column("b").to_pylist(),
            table.column("count_all").to_pylist(),
            strict=True,
        )
    }


def _content_hash(value: Any) -> str:
    import hashlib

    import pyarrow as pa

    try:
        import pandas as pd

        if isinstance(value, pd.DataFrame):
            return str(int(pd.util.hash_pandas_object(value, index=False).sum()))
    except ImportError:
        pass
    if isinstance(value, pa.Table):
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, value.schema) as writer:
            writer.write_table(value)
        return hashlib.sha256(sink.getvalue().to_pybytes()).hexdigest()
    return repr(value)
