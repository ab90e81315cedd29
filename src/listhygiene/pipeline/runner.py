"""The stages of one run: set up, read, verify, write, check, summarise, publish.

1. **Read** the input batch by batch; each row gets its row number and its cleaned address and
   is staged as Parquet in the work folder (the input may be larger than memory, or a database
   that should be read once); the distinct addresses are found out of core
   (:mod:`listhygiene.pipeline.worktables`).
2. **Verify** each distinct address once, through a backend, as jobs whose ids are recorded
   before waiting; results are saved as they come. A resumed run verifies only what is missing;
   a second pass can verify again the addresses that ended unknown for a temporary reason.
3. **Write**: join the results back onto every row, in bounded batches, and append them to one
   Parquet file per status, all seven always, each row in exactly one
   (:mod:`listhygiene.pipeline.writer`).
4. **Check** what was written with great-expectations, and write ``summary.json``
   (:mod:`listhygiene.pipeline.summary`) and ``report.html``. Only then do the files move into
   place.

Memory does not grow with the row count (docs/pipeline.md, "Memory").
"""

import asyncio
import dataclasses
import logging
import math
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from listhygiene._version import __version__
from listhygiene.engine import EngineSettings
from listhygiene.errors import BackendError, UnreachableError
from listhygiene.pipeline.backends import (
    KEY,
    Backend,
    InsufficientCredits,
    JobFailed,
    JobRef,
    make_backend,
)
from listhygiene.pipeline.layout import CHANGED, STATUSES, status_file
from listhygiene.pipeline.outputs import OutputFolder
from listhygiene.pipeline.publish import prepare_report, publish
from listhygiene.pipeline.quality import default_worker_kind, warm_up
from listhygiene.pipeline.result import CleanResult
from listhygiene.pipeline.summary import Summary, run_health, run_politeness, uncertain_credits
from listhygiene.pipeline.verdict_memory import RunVerdicts, open_verdicts
from listhygiene.pipeline.workdir import ADDRESS, ROW, VERIFIED_AT, WorkDir
from listhygiene.pipeline.worktables import PENDING, WorkTables
from listhygiene.pipeline.writer import Written, write_outputs
from listhygiene.statuses import TEMPORARY_REASONS, Status

if TYPE_CHECKING:
    import pyarrow as pa

    from listhygiene.pipeline.quality import QualityReport, QualityWorker

log = logging.getLogger(__name__)

__all__ = ["Progress", "Run"]

#: Called with (phase, done, total) as the run goes; total 0 when unknown.
Progress = Callable[[str, int, int], None]
#: Bounds on what one step holds (docs/pipeline.md, "Memory"): addresses looked up in the verdict
#: store at once, and addresses in one job of a backend whose jobs live in this process.
_REUSE_BATCH = 100_000
_LOCAL_JOB = 200_000


@dataclasses.dataclass
class Run:
    """One run of :func:`~listhygiene.pipeline.api.aclean` or of its ``asubmit``."""

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
    #: Of ``suggestion``, ``mx_provider``: written after the result columns (pipeline/advice.py).
    extra_columns: tuple[str, ...] = ()
    #: The verdict store as this run uses it (None: no store), open while the run runs.
    memory: "RunVerdicts | None" = None
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    counters: Counter[str] = dataclasses.field(default_factory=Counter)
    #: Broken input records kept as rows (from the source, or the manifest on a resume).
    bad_records: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    #: What the earlier attempts' SMTP sessions cost the mail hosts (the manifest's, on a
    #: resume): this attempt's add up to it (docs/pipeline.md, "Politeness").
    politeness_before: Mapping[str, Any] | None = None

    async def submit_only(self) -> list[JobRef]:
        from listhygiene.pipeline.sources import open_source
        from listhygiene.pipeline.sources.columns import find_email_column

        source = open_source(
            self.source, table=self.table, query=self.query, encoding=self.encoding
        )
        column = find_email_column(
            source.schema, source.sample(), self.email_column, source_name=source.info.name
        )
        OutputFolder(self.out).check_writable()
        backend = self._backend()
        work: WorkDir | None = None
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
            if work is not None:
                work.settle()
            await backend.aclose()
            if self.memory is not None:
                self.memory.close()

    async def execute(self) -> CleanResult:
        from listhygiene.pipeline.sources import open_source
        from listhygiene.pipeline.sources.columns import find_email_column

        started_at = datetime.now(UTC)
        started = time.perf_counter()
        in_process = _remote(self.out) or default_worker_kind() == "thread"  # before any work
        # GX's import (seconds) runs meanwhile, from the start, set-up included: in a child
        # process where it can read the outputs (a local folder) unless
        # LISTHYGIENE_QUALITY_WORKER=thread, else in a thread of this one
        worker = warm_up(process=not in_process)
        try:
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
            self.politeness_before = work.manifest.get("politeness")
            tables = WorkTables(work)
        except BaseException:
            worker.close()  # a bad input or set-up: no checks will run
            raise
        try:
            with _timed(self.timings, "read"):
                rows, distinct = self._read(source, column, work, tables)
            with _timed(self.timings, "verify"):
                await self._verify(backend, work, tables, distinct)
                if self.retry_unknown_after is not None:
                    await self._second_pass(backend, work, tables)
            health = run_health(work.manifest.get("health"), backend.health)
            politeness = self._politeness(backend)
            work.set_stage("writing", health=health, politeness=politeness)
            self._check_health(health)
            with _timed(self.timings, "write"):
                written = write_outputs(
                    folder,
                    work,
                    tables,
                    previous=self.memory.previous_folder(work) if self.memory else None,
                    changed_file=self.memory is not None,
                    extra_columns=(
                        self.memory.output_columns(self.extra_columns)
                        if self.memory
                        else self.extra_columns
                    ),
                    source=source,
                )
            # DuckDB's buffers and Arrow's freed pages go back before the checks, which run in
            # GX's process meanwhile (docs/pipeline.md, "Memory")
            tables.close()
            _release_memory()
            if self.memory is not None:
                # while the checks run in GX's process: this one is at its smallest then, and
                # a core is free (docs/pipeline.md, "Verdict store speed")
                self.memory.refresh_copy()
            with _timed(self.timings, "quality"):
                checked = self._check(folder, written, rows, worker)
                prepare_report()  # while the checks run (docs/pipeline.md, "Small lists")
                report = checked()
            if report.skipped:
                log.warning("%s", report.skipped)
            self.timings["total"] = time.perf_counter() - started
            summary = Summary(
                info=info,
                email_column=column,
                out=self.out,
                backend=backend.name,
                check_smtp=self.check_smtp,
                rows=rows,
                bad_records=self.bad_records,
                distinct=distinct,
                written=written,
                counters=dict(self.counters),
                resumed=resumed,
                uncertain_credits=uncertain_credits(backend),
                started_at=started_at,
                timings=dict(self.timings),
                health=health,
                quality={**report.as_dict(), "mode": self.quality_mode},
                verdicts=(
                    self.memory.counts(work, distinct, written.changed)
                    if self.memory is not None
                    else {"reused": 0, "verified": distinct, "changed": 0}
                ),
                politeness=politeness,
                verdict_store=(
                    {
                        **self.memory.report(work, written.transitions),
                        "changed_file": {"path": CHANGED, "rows": written.changed_rows},
                    }
                    if self.memory is not None
                    else None
                ),
                feedback=self.memory.feedback_summary(work) if self.memory else None,
            ).as_dict()
            publish(
                folder,
                summary,
                report,
                quality_mode=self.quality_mode,
                changed=self.memory is not None,
            )
        except BaseException:
            folder.discard()
            self._keep_politeness(work, backend)
            raise
        finally:
            work.settle()  # what a failed run saved is on disk when it returns
            worker.close()
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
        else:  # an object at a URL: its size and ETag (docs/object-storage.md)
            from listhygiene.pipeline.storage import object_identity

            identity.update(object_identity(os.fspath(self.source)))
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

        from listhygiene.email_cells import clean_cells
        from listhygiene.pipeline.sources import SourceError

        if work.stage not in ("new", "reading"):
            self.bad_records = list(work.manifest.get("bad_records", []))
            return int(work.manifest["rows"]), tables.distinct()
        work.clear_rows()
        work.set_stage("reading")
        total = 0
        # an input that can be read again as it was is not copied: the writer reads it again
        keep_inputs = not source.rereadable
        try:
            for index, batch in enumerate(source.batches()):
                chunk = pa.Table.from_batches([batch])
                cleaned = clean_cells(chunk.column(column))
                numbers = pa.array(np.arange(total + 1, total + len(chunk) + 1, dtype=np.int64))
                staged = chunk if keep_inputs else chunk.select([])
                staged = staged.append_column(ROW, numbers).append_column(ADDRESS, cleaned)
                work.write_rows(index, staged)
                total += len(chunk)
                self.progress("read", total, 0)
        except SourceError:
            work.remove()  # a half-read input is refused, not resumed: nothing is left
            raise
        distinct = tables.distinct()
        _release_memory()  # the read's batches are gone: their pages go back before verifying
        self.bad_records = [dataclasses.asdict(b) for b in source.info.bad_records]
        work.set_stage(
            "read",
            rows=total,
            bad_records=self.bad_records,
            inputs="staged" if keep_inputs else "source",
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
        known: set[tuple[str, str]] = set()
        if self.memory is not None:
            # the disposable services' mail hosts earlier runs saw (docs/engine.md, "Lists")
            known = set(await asyncio.to_thread(self.memory.store.disposable_host_sightings))
            backend.add_disposable_host_sightings(known)
        try:
            await self._verify_jobs(backend, work, tables, distinct)
        finally:
            seen = set(backend.disposable_host_sightings) - known
            if self.memory is not None and seen:
                await asyncio.to_thread(self.memory.store.keep_disposable_host_sightings, seen)

    async def _verify_jobs(
        self, backend: Backend, work: WorkDir, tables: WorkTables, distinct: int
    ) -> None:
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
            self.memory.prepare(pending)
            self.memory.reuse(
                work,
                tables.addresses(PENDING, _REUSE_BATCH),
                total=pending,
                check_smtp=bool(self.check_smtp),
            )
            self.memory.looked_up()
            work.flush()
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
            work.add_job(job, wait=backend.resumable)  # a remote job is on disk before waiting
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
                work.write_results(self.memory.with_evidence(work, table) if self.memory else table)
                if self.memory is not None:
                    await asyncio.to_thread(self.memory.save, table, backend=backend.name)
                self.counters["results"] += len(table)
                self.progress(
                    "verify",
                    min(total, self.counters["reused"] + self.counters["results"]),
                    total,
                )
        except JobFailed as exc:
            work.manifest["politeness"] = self._politeness(backend)  # saved with the jobs
            for done in (job, *started):
                work.finish_job(done)  # a rerun submits what it lacked, not waiting on it again
            raise BackendError(f"{exc}; run again to verify its addresses anew") from None
        # the manifest saved when the job is finished says what the sessions cost so far (a
        # rerun after a crash adds its own to it)
        work.manifest["politeness"] = self._politeness(backend)
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

    # -- politeness ------------------------------------------------------------------------------

    def _politeness(self, backend: Backend) -> dict[str, int]:
        """What the run's SMTP sessions cost the mail hosts: the earlier attempts' and this
        one's so far."""
        return run_politeness(self.politeness_before, backend.politeness)

    def _keep_politeness(self, work: WorkDir, backend: Backend) -> None:
        """Record in the manifest of a run that stops what its sessions cost the mail hosts so
        far, earlier attempts included: the rerun adds its own (an attempt that failed while
        verifying had opened sessions too). Nothing when the work folder is gone (a refused
        input) or nothing changed (a remote backend)."""
        if not work.manifest:
            return
        politeness = self._politeness(backend)
        if politeness == run_politeness(work.manifest.get("politeness")):
            return
        work.manifest["politeness"] = politeness
        try:
            work.save(wait=False)
        except Exception as exc:  # the run's own error is the one to raise
            log.warning("the run's politeness was not kept in %s: %s", work.path, exc)

    # -- check -----------------------------------------------------------------------------------

    def _check(
        self, folder: OutputFolder, written: Written, rows: int, worker: "QualityWorker"
    ) -> "Callable[[], QualityReport]":
        """The data-quality checks over every written row, flat in memory, where GX was
        warmed up (docs/pipeline.md, "Quality checks"): begun, and waited for by calling what
        this returns."""
        numbers: dict[str, Any] = dict(written.row_numbers)
        if _remote(self.out):  # the row numbers are local, the outputs not: read them here
            numbers = {s: _row_batches(path) for s, path in numbers.items()}
        return worker.begin(
            {s: folder.staged(status_file(s)) for s in STATUSES},
            expected_rows=rows,
            summary_rows={s: int(written.by_status[s]) for s in STATUSES},
            row_numbers=numbers,
            filesystem=folder.fs,
        )

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


# -- helpers -------------------------------------------------------------------------------------


class _timed:
    def __init__(self, timings: dict[str, float], name: str) -> None:
        self.timings, self.name = timings, name

    def __enter__(self) -> None:
        self.started = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.timings[self.name] = self.timings.get(self.name, 0.0) + (
            time.perf_counter() - self.started
        )


def _jsonable(values: Mapping[str, Any]) -> dict[str, Any]:
    """As stored in the manifest's JSON, so that a loaded fingerprint compares equal."""
    import json

    loaded: dict[str, Any] = json.loads(json.dumps(dict(values), default=str))
    return loaded


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


def _release_memory() -> None:
    import pyarrow as pa

    pa.default_memory_pool().release_unused()


def _remote(out: str) -> bool:
    return "://" in out and not out.startswith("file://")


def _row_batches(path: str) -> Iterator["pa.Array"]:
    """A local file of row numbers, batch by batch."""
    import pyarrow.parquet as pq

    with pq.ParquetFile(path) as file:
        for batch in file.iter_batches(columns=[ROW]):
            yield batch.column(0)
