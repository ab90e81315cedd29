"""The operator: clean an address table with :func:`listhygiene.clean`, as one Airflow task.

Non-deferrable, the task runs the whole clean on its worker (read, verify, write the per-status
Parquet files, quality checks, report) and returns the run's summary as its XCom.

Deferrable (``deferrable=True``), a remote backend's jobs are *submitted* first
(:func:`listhygiene.pipeline.submit`, which records them in the output's work folder), checked
once, and the task defers to :class:`VerificationJobTrigger`: no worker slot is held while the
service works. When the trigger fires, ``execute_complete`` calls ``clean`` with the same
arguments, which reads the recorded jobs' results instead of submitting again. For the same
reason a retried task (a killed worker, a timeout) resumes the job it submitted: ``submit`` finds
the jobs recorded in the work folder and submits nothing. With the local engine there is nothing
to wait for remotely; the task simply runs ``clean``.

The verdict store (``verdicts``, ``verdicts_conn_id``, ``max_age``, ``fresh``) goes to ``submit``
and to ``clean`` alike: fresh verdicts are taken before anything is submitted, so a remote
service verifies (and charges for) only the rest, and a run with nothing left to verify never
defers. The XCom's ``verdicts`` says how many were reused, verified and changed status.

Lineage (docs/airflow.md, "Lineage and assets"): the task's default ``outlets`` are one Airflow
``Asset`` per status file (:func:`~listhygiene_airflow.lineage.status_assets`), each event
carrying the run's file and rows; ``get_openlineage_facets_on_complete`` describes the input
and output datasets, row counts and quality checks to the OpenLineage provider. The XCom is the
summary, bounded in size (:func:`~listhygiene_airflow.lineage.bounded_summary`).

A dry run (``dry_run=True``) verifies nothing: the task reads the input and returns
:func:`listhygiene.estimate`'s counts as its XCom (rows, distinct addresses, invalid syntax,
verdicts the store would reuse, addresses left to verify, a remote backend's credits and balance,
a time estimate), with the options a real run of the task would take; it never defers, writes
nothing into ``out`` and declares no assets.

Killing the task (``on_kill``: a task marked failed, a timeout) cancels the running ``clean`` at
once, which stops the local engine's SMTP sessions, and cancels the remote jobs recorded in the
work folder (form B) or abandons them (form A): the work folder stays for a retry to resume.
"""

import asyncio
import os
import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook, BaseOperator, conf
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from listhygiene.pipeline import CancellableRun, RunCancelled, cancel_jobs, recorded_jobs
from listhygiene_airflow.hooks.verification import (
    FAILED,
    ListHygieneHook,
    sqlalchemy_url,
    verdicts_url_of,
)
from listhygiene_airflow.lineage import (
    asset_extra,
    assets_root,
    bounded_summary,
    lineage_facts,
    operator_lineage,
    status_assets,
)
from listhygiene_airflow.triggers.verification import VerificationJobTrigger, outcome

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["EmailVerificationOperator", "sqlalchemy_url"]


class EmailVerificationOperator(BaseOperator):
    """Verify the addresses of a table and write one Parquet file per status into ``out``.

    :param source: a file path (CSV, TSV, TXT, XLSX, XLS, Parquet, JSONL) or a SQLAlchemy URL;
        with ``sql_conn_id`` it may be left out. Templated.
    :param out: the output folder or filesystem URL (one run's outputs; use a folder per run,
        e.g. ``/data/clean/{{ dag_run.run_after | ds }}``: a manual run has no ``ds``). Templated.
    :param sql_conn_id: an Airflow connection to a database to read from (with ``table`` or
        ``query``); its SQLAlchemy URL, or the ``sqlalchemy_url`` extra, is the source.
    :param table: a table (``schema.table``) of the database. Templated.
    :param query: a SELECT instead of a table. Templated.
    :param listhygiene_conn_id: the ``listhygiene`` connection: which backend verifies.
    :param email_column: the column holding the addresses (found by itself when None).
        Templated.
    :param check_smtp: probe mailboxes; None takes the connection's ``check_smtp`` extra, then
        the backend's default.
    :param quality: ``"fail"`` (a failing data-quality check fails the task and publishes
        nothing) or ``"warn"``.
    :param accept_unreachable: publish although most domains could not be reached on port 25
        (the run's health problem). False: the task fails, without retries (a retry reads the
        same kept results), and publishes nothing; run it again with True to publish them.
    :param verdicts: the verdict store whose fresh verdicts are reused and which keeps every new
        one: a SQLAlchemy URL, or ``"none"`` for none. Templated. None: ``verdicts_conn_id``, then
        the ``listhygiene`` connection's ``verdicts_conn_id`` or ``verdicts`` extra, then
        ``LISTHYGIENE_VERDICTS``, else the worker's own cache file.
    :param verdicts_conn_id: an Airflow database connection (a Postgres one, typically) holding
        the verdict store; not with ``verdicts``.
    :param max_age: how old a reused verdict may be (``"30d"``, ``"valid=14d,risky=1d"``).
        Templated. None: the connection's ``max_age`` extra, else the documented defaults.
    :param fresh: verify everything again (the store is still updated, changes still listed).
    :param deferrable: submit, then free the worker while the remote job runs.
    :param poll_interval: seconds between status checks while deferred.
    :param job_timeout: how long the remote jobs may take, from the deferral on.
    :param write_back_conn_id: an Airflow database connection (Postgres, SQLite, DuckDB) whose
        table ``write_back_table`` gets the result columns upserted once the outputs are
        published (docs/pipeline.md, "Writing back"); its counts go into the XCom.
    :param write_back_table: the table (``schema.table``). Templated.
    :param write_back_key: the input column keying that table; None: the verified address.
    :param assets: declare the seven per-status files as the task's ``outlets`` (Airflow
        assets a downstream DAG can be scheduled on), unless ``outlets`` is given: True names
        them after ``out`` (its part before the first template; ``listhygiene://<dag>/<task>``
        when it starts with one), a string is the URI they sit under
        (``<assets>/valid.parquet``, ...), False declares none.
    :param dry_run: verify nothing; return the estimate of what the run would do as the
        XCom (``Estimate.as_dict()``), with no assets and nothing written.
    """

    template_fields: Sequence[str] = (
        "source",
        "out",
        "table",
        "query",
        "email_column",
        "verdicts",
        "max_age",
        "write_back_table",
    )
    ui_color = "#e8f4ea"

    def __init__(
        self,
        *,
        out: str | os.PathLike[str],
        source: str | os.PathLike[str] | None = None,
        sql_conn_id: str | None = None,
        table: str | None = None,
        query: str | None = None,
        listhygiene_conn_id: str = ListHygieneHook.default_conn_name,
        email_column: str | None = None,
        check_smtp: bool | None = None,
        quality: str = "fail",
        accept_unreachable: bool = False,
        verdicts: str | None = None,
        verdicts_conn_id: str | None = None,
        max_age: str | float | None = None,
        fresh: bool = False,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        poll_interval: float = 30.0,
        job_timeout: timedelta | float = timedelta(hours=24),
        assets: bool | str = True,
        write_back_conn_id: str | None = None,
        write_back_table: str | None = None,
        write_back_key: str | None = None,
        dry_run: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if assets and not self.outlets and not dry_run:
            fallback = f"listhygiene://{self.dag_id}/{self.task_id}"
            root = (
                assets
                if isinstance(assets, str)
                else assets_root(os.fspath(out), fallback=fallback)
            )
            self.outlets = status_assets(root)
        if source is None and sql_conn_id is None:
            raise ValueError("give source (a path or a database URL) or sql_conn_id")
        if sql_conn_id is not None and table is None and query is None:
            raise ValueError("sql_conn_id needs table or query")
        if quality not in ("fail", "warn"):
            raise ValueError("quality must be 'fail' or 'warn'")
        if verdicts and verdicts_conn_id:
            raise ValueError("give verdicts (a URL or 'none') or verdicts_conn_id, not both")
        if (write_back_conn_id is None) != (write_back_table is None):
            raise ValueError("write_back_conn_id and write_back_table go together")
        self.source = os.fspath(source) if source is not None else None
        self.out = os.fspath(out)
        self.sql_conn_id = sql_conn_id
        self.table = table
        self.query = query
        self.listhygiene_conn_id = listhygiene_conn_id
        self.email_column = email_column
        self.check_smtp = check_smtp
        self.quality = quality
        self.accept_unreachable = accept_unreachable
        self.verdicts = verdicts
        self.verdicts_conn_id = verdicts_conn_id
        self.max_age = max_age
        self.fresh = fresh
        self.deferrable = deferrable
        self.poll_interval = poll_interval
        self.job_timeout = (
            job_timeout.total_seconds() if isinstance(job_timeout, timedelta) else job_timeout
        )
        self.write_back_conn_id = write_back_conn_id
        self.write_back_table = write_back_table
        self.write_back_key = write_back_key
        # (BaseOperator.dry_run() is Airflow's own: rendering the templates without running)
        self.estimate_only = dry_run
        self._running: CancellableRun | None = None
        self._summary: dict[str, Any] | None = None

    @property
    def hook(self) -> ListHygieneHook:
        return ListHygieneHook(self.listhygiene_conn_id)

    # -- what clean() and submit() are called with ---------------------------------------------

    def _source(self) -> str:
        if self.sql_conn_id is None:
            assert self.source is not None
            return self.source
        return sqlalchemy_url(BaseHook.get_connection(self.sql_conn_id))

    def _options(self, hook: ListHygieneHook) -> dict[str, Any]:
        check_smtp = self.check_smtp if self.check_smtp is not None else hook.check_smtp
        return {
            "email_column": self.email_column or None,
            "table": self.table or None,
            "query": self.query or None,
            "backend": hook.get_backend(poll_seconds=min(self.poll_interval, 5.0)),
            "check_smtp": check_smtp,
            "quality": self.quality,
            "accept_unreachable": self.accept_unreachable,
            # the same store both times on the deferrable path: submit() reuses before it
            # submits, so a remote service is asked (and paid) only for what is verified
            "verdicts": self._verdicts(hook),
            "max_age": self.max_age if self.max_age not in (None, "") else hook.max_age,
            "fresh": bool(self.fresh),
        }

    def _verdicts(self, hook: ListHygieneHook) -> str | None:
        """The verdict store's URL (or ``"none"``); None lets ``clean`` take its default."""
        if self.verdicts:  # a template may render to "" when no store is named
            return str(self.verdicts)
        if self.verdicts_conn_id:
            return verdicts_url_of(self.verdicts_conn_id)
        return hook.verdicts_url()

    def _cancellable(self, hook: ListHygieneHook, coroutine: Any) -> Any:
        """Run ``coroutine`` so that :meth:`on_kill` can stop it; once stopped, cancel or
        abandon the remote jobs it recorded and fail the try (the work folder stays)."""
        running = self._running = CancellableRun()
        try:
            return running.run(coroutine)
        except RunCancelled:
            fate = self._stop_remote_jobs(hook)
            raise AirflowException(
                f"killed; the work folder {self.out} is kept for a retry to resume"
                + (f" (remote jobs: {fate})" if fate else "")
            ) from None
        finally:
            self._running = None

    def _stop_remote_jobs(self, hook: ListHygieneHook) -> dict[str, str]:
        """Cancel (form B) or abandon (form A) the jobs recorded in the work folder."""
        jobs = recorded_jobs(self.out)
        if not jobs:
            return {}
        fate = asyncio.run(cancel_jobs(self.out, jobs, hook.client_settings()))
        self.log.warning("remote jobs of the killed task: %s", fate)
        return fate

    def on_kill(self) -> None:
        """Stop the running clean at once (called from the task's SIGTERM handler, or on an
        execution timeout); its ``finally`` then cancels or abandons the remote jobs."""
        running = self._running
        if running is not None:
            self.log.warning("killed: cancelling the verification of %s", self.out)
            running.cancel()

    def _clean(self, hook: ListHygieneHook) -> dict[str, Any]:
        from listhygiene import aclean
        from listhygiene.pipeline import UnreachableError

        try:
            cleaning = aclean(self._source(), self.out, **self._options(hook))
            result = self._cancellable(hook, cleaning)
        except UnreachableError as exc:
            # Where the task ran, not the list: a retry would read the same kept results.
            raise AirflowFailException(f"{exc}; accept_unreachable=True publishes them") from None
        counts = ", ".join(f"{s}={n}" for s, n in result.counts.items() if n)
        total = result.summary["rows"]["total"]
        self.log.info("cleaned %d rows into %s (%s)", total, self.out, counts)
        verdicts = result.summary.get("verdicts")
        if verdicts and "verdict_store" in result.summary:
            self.log.info(
                "verdict store %s: %d reused, %d verified, %d changed status",
                result.summary["verdict_store"].get("store"),
                verdicts["reused"],
                verdicts["verified"],
                verdicts["changed"],
            )
        if not result.passed:
            self.log.warning("data-quality checks failed (quality=warn): %s", result.quality)
        self._summary = dict(result.summary)
        summary = bounded_summary(result.summary)
        if self.write_back_conn_id is not None and self.write_back_table is not None:
            written = result.write_back(
                sqlalchemy_url(BaseHook.get_connection(self.write_back_conn_id)),
                self.write_back_table,
                key=self.write_back_key,
            )
            self.log.info(
                "wrote back %d rows into %s (key %s, %d without one)",
                written.written,
                written.table,
                written.key,
                written.skipped,
            )
            summary["write_back"] = written.as_dict()
        return summary

    def _published(self, context: "Context", summary: dict[str, Any]) -> dict[str, Any]:
        """Give each status asset's event the run's file and rows."""
        events = context.get("outlet_events")
        if events is not None and self._summary is not None:
            for asset in self.outlets:
                status = str(getattr(asset, "uri", "")).rsplit("/", 1)[-1].removesuffix(".parquet")
                if status in self._summary.get("rows", {}).get("by_status", {}):
                    events[asset].extra = asset_extra(self._summary, status)
        return summary

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The run's input and output datasets, row counts and quality results, for the
        OpenLineage provider (a plain :class:`~listhygiene_airflow.lineage.Lineage` when it
        is not installed); None before a run finished."""
        if self._summary is None:
            return None
        source = self.source if self.sql_conn_id is None else self._source()
        return operator_lineage(lineage_facts(str(source), self._summary, table=self.table))

    # -- running -------------------------------------------------------------------------------

    def _estimate(self, hook: ListHygieneHook) -> dict[str, Any]:
        """The dry run: :func:`listhygiene.estimate` with the run's options, as the XCom."""
        from listhygiene.pipeline import estimate

        options = self._options(hook)
        for run_only in ("quality", "accept_unreachable"):
            del options[run_only]
        found = estimate(self._source(), **options)
        credits = found.credits
        self.log.info(
            "dry run of %s: %d rows, %d distinct addresses (%d invalid by syntax), %d reused, "
            "%d left to verify on %s%s; about %.0f s (%s)",
            found.source,
            found.rows,
            found.distinct,
            found.invalid_syntax,
            found.reused,
            found.to_verify,
            found.backend,
            "" if credits is None else f", {credits.needed} credits of {credits.balance}",
            found.time.seconds,
            found.time.limited_by,
        )
        return found.as_dict()

    def execute(self, context: "Context") -> dict[str, Any]:
        hook = self.hook
        if self.estimate_only:
            return self._estimate(hook)
        if not self.deferrable:
            return self._published(context, self._clean(hook))
        from listhygiene.pipeline import asubmit

        jobs = self._cancellable(hook, asubmit(self._source(), self.out, **self._options(hook)))
        if not jobs:  # the local engine: nothing runs remotely
            return self._published(context, self._clean(hook))
        self.log.info("jobs to wait for: %s", ", ".join(j.job_id for j in jobs))
        # Jobs that ended already are read now, by the path a trigger event takes; deferring on
        # them would have the trigger fire before the deferral is recorded.
        ended = outcome([hook.job_status_sync(job) for job in jobs])
        if ended is not None:
            return self.execute_complete(context, ended)
        self.defer(
            trigger=VerificationJobTrigger(
                listhygiene_conn_id=self.listhygiene_conn_id,
                jobs=[job.as_dict() for job in jobs],
                deadline=time.time() + self.job_timeout,
                poll_interval=self.poll_interval,
                not_before=VerificationJobTrigger.first_check(),
            ),
            method_name="execute_complete",
        )
        raise AssertionError("defer() returns only by raising")  # pragma: no cover

    def execute_complete(
        self, context: "Context", event: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """The trigger fired: read the jobs' results and write the outputs, or fail."""
        event = dict(event or {})
        status = event.get("status")
        if status == "success":
            return self._published(context, self._clean(self.hook))
        if any(job.get("status") == FAILED for job in event.get("jobs", [])):
            # clean() records the failed job as finished and raises; a retry submits anew
            self._clean(self.hook)
        raise AirflowException(
            f"verification jobs did not complete ({status}): {event.get('message')}; a retry "
            "resumes the same jobs"
        )
