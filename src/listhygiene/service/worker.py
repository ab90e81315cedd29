"""The background worker of jobs (form A file jobs, form B bulk jobs), started and stopped with
the server.

It polls the store for a job to claim (and is woken at once by a submission), verifies the job's
pending addresses with the engine, writes the results in batches (every ``batch_size`` results or
``flush_seconds``), heartbeats meanwhile, and settles the job. It runs up to ``slots`` jobs at
once, so that a large job does not hold up a small one behind it; they share the engine, whose
per-host limits keep the mail hosts' load polite whatever the number of jobs. The store is
synchronous, so its calls run in threads; given a ``store_writer`` (the job runner's), its
writes on SQLite run there instead, with the event loop waiting (see :meth:`JobWorker._write`).

Several workers (in one process or several) share the jobs through the store's claims; a job
whose worker died is claimed again after ``stale_after`` seconds and resumes with only the
addresses that have no result, so nothing is verified or charged twice.

The database going away (a lost connection, a serialization failure, SQLite's "database is
locked") is not the job's fault: each store call is tried again with back-off for up to
``db_retry_seconds`` (by default ``stale_after``: past that another worker may take the job over
anyway), and a job whose store calls still fail is handed back, unsaved results dropped, to be
resumed by any worker. Only an error of the job itself fails it (docs/service.md, Faults).
"""

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, ParamSpec, TypeVar

from listhygiene.errors import first_line
from listhygiene.results import VerificationResult
from listhygiene.service.events import announce_job
from listhygiene.service.store import Store
from listhygiene.service.store.jobs import (
    LostClaim,
    StoredJob,
    claim_job,
    duplicate_addresses,
    fail_job,
    finish_job,
    heartbeat,
    pending_addresses,
    prepare_results,
    release_job,
    save_prepared,
)
from listhygiene.service.store.models import new_id
from listhygiene.service.store.retry import is_transient, retry_async, retry_attempts

__all__ = ["JobWorker"]

log = logging.getLogger(__name__)

_P = ParamSpec("_P")
_T = TypeVar("_T")


#: How long the runner's event loop stops for a write in the store writer before it runs on
#: beside it: the statements take milliseconds, but a wait for SQLite's write lock (another
#: process's big transaction) must not stop the job's DNS and SMTP past their time limits
#: (docs/service.md, "Fairness").
LOOP_PAUSE = 0.25
#: A failed job's error code, in its form's words.
_FAILURE_CODES = {"a": "1000", "b": "INTERNAL_ERROR"}
#: The longest wait between two tries to claim a job while the database is unavailable.
_CLAIM_BACKOFF_MAX = 5.0
#: How long a job being handed back tries to write its release (else it waits to go stale).
_RELEASE_RETRY_SECONDS = 1.0


class _HandBack(Exception):
    """The store stayed unavailable past the retry budget: give the job back, do not fail it."""


class JobWorker:
    """Claims and runs jobs in asyncio tasks, up to ``slots`` at once."""

    def __init__(
        self,
        store: Store,
        engine: Any,
        *,
        poll_seconds: float = 0.2,
        stale_after: float = 60,
        slots: int = 2,
        batch_size: int = 100,
        flush_seconds: float = 1.0,
        worker_id: str | None = None,
        db_retry_seconds: float | None = None,
        store_writer: Executor | None = None,
        feedback: Any = None,
    ) -> None:
        self.store = store
        #: A verdict store's feedback applied to each result (verdicts/feedback.py), or None.
        self.feedback = feedback
        self.engine = engine
        self.poll_seconds = poll_seconds
        self.stale_after = stale_after
        self.slots = max(1, slots)
        self.batch_size = batch_size
        self.flush_seconds = flush_seconds
        self.worker_id = worker_id or f"{os.getpid()}-{new_id()}"
        self.db_retry_seconds = stale_after if db_retry_seconds is None else db_retry_seconds
        # One thread for the writes on SQLite (else None: they go to threads as the reads do).
        self._writer = store_writer if store.backend == "sqlite" else None
        self._tasks: list[asyncio.Task[None]] = []
        self._wake: asyncio.Event | None = None
        self._release = True

    # -- life cycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        if self._tasks:
            return
        self._wake = asyncio.Event()
        self._release = True
        self._tasks = [
            asyncio.create_task(self._run(slot), name=f"job-worker-{self.worker_id}-{slot}")
            for slot in range(self.slots)
        ]

    async def stop(self, *, release: bool = True) -> None:
        """Stop; ``release=False`` leaves the current jobs claimed, as a killed process would."""
        tasks, self._tasks = self._tasks, []
        if not tasks:
            return
        self._release = release
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def wake(self) -> None:
        """Look for a job now (a job was just submitted). Safe from the worker's loop only."""
        if self._wake is not None:
            self._wake.set()

    # -- the loop -------------------------------------------------------------------------------

    async def _run(self, slot: int) -> None:
        assert self._wake is not None
        # Each slot claims under its own name: a slot whose job went stale (its store calls
        # stalled past ``stale_after``) and was taken over by a sibling slot loses its claim
        # like any other worker, instead of running the job twice.
        claimer = f"{self.worker_id}/{slot}"
        idle = self.poll_seconds
        while True:
            try:
                job = await asyncio.to_thread(
                    claim_job, self.store, claimer, stale_after=self.stale_after
                )
                idle = self.poll_seconds
            except Exception as exc:
                if is_transient(exc):
                    log.warning("claiming a job failed, the database is unavailable: %s", exc)
                else:
                    log.exception("claiming a job failed")
                job = None
                # Back off while the database is away, instead of polling it every 0.2 s.
                idle = min(max(idle * 2, self.poll_seconds), _CLAIM_BACKOFF_MAX)
            if job is not None:
                await self._process(job, claimer)
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), idle)
            # Every idle slot was woken by set(); the first to get here clears it for the next.
            self._wake.clear()

    async def _process(self, job: StoredJob, claimer: str) -> None:
        work = asyncio.create_task(self._work(job, claimer))
        beat = asyncio.create_task(self._heartbeat(job.id, claimer))
        try:
            done, _ = await asyncio.wait({work, beat}, return_when=asyncio.FIRST_COMPLETED)
            if work not in done:
                log.warning("job %s was taken over by another worker", job.id)
        finally:
            beat.cancel()
            if not work.done():
                work.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await work

    async def _work(self, job: StoredJob, claimer: str) -> None:
        buffer: list[tuple[str, VerificationResult]] = []
        duplicates: dict[str, int] | None = None
        try:
            pending = await self._db(pending_addresses, self.store, job.id)
            # read once: form B counts submitted rows, and they do not change (store/jobs.py)
            duplicates = await self._db(duplicate_addresses, self.store, job.id)
            last = time.monotonic()
            # bulk work, its key the tenant: interactive requests go first (docs/service.md)
            verified = self.engine.verify_each(
                pending, check_smtp=job.check_smtp, priority="bulk", tenant=job.api_key_id
            )
            async for given, result in verified:
                buffer.append((str(given), result))
                if len(buffer) >= self.batch_size or time.monotonic() - last >= self.flush_seconds:
                    batch, buffer = buffer, []
                    await self._save(job.id, batch, claimer, duplicates)
                    last = time.monotonic()
            batch, buffer = buffer, []
            await self._save(job.id, batch, claimer, duplicates)
            await self._write(finish_job, self.store, job.id, claimer, announce=announce_job)
        except LostClaim:
            log.warning("job %s was taken over by another worker", job.id)
        except asyncio.CancelledError:
            if self._release:
                # A clean stop: keep what is verified and give the job back for a restart.
                # Synchronous (quick statements): an await could be cancelled in turn.
                with contextlib.suppress(Exception):
                    if buffer:
                        prepared = prepare_results(job.id, buffer)
                        save_prepared(
                            self.store, prepared, worker_id=claimer, duplicates=duplicates
                        )
                    release_job(self.store, job.id, claimer)
            raise
        except _HandBack as exc:
            # Not the job's fault: another worker (or this one, after ``stale_after`` if the
            # release cannot be written either) resumes it from its saved results.
            log.warning("job %s handed back, the database is unavailable: %s", job.id, exc)
            try:
                await retry_async(_RELEASE_RETRY_SECONDS, release_job, self.store, job.id, claimer)
            except Exception as error:
                log.warning("job %s stays claimed until it is stale: %s", job.id, error)
        except Exception as exc:
            log.exception("job %s failed", job.id)
            try:
                await self._write(
                    fail_job,
                    self.store,
                    job.id,
                    _FAILURE_CODES[job.form],
                    f"Verification failed ({type(exc).__name__})",
                    claimer,
                    announce=announce_job,
                )
            except Exception as error:
                log.warning("job %s could not be marked failed: %s", job.id, error)

    async def _db(self, call: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """A store call in a thread, tried again while the database is unavailable; raises
        :class:`_HandBack` when it still is after ``db_retry_seconds``."""
        try:
            return await retry_async(self.db_retry_seconds, call, *args, **kwargs)
        except Exception as exc:
            if is_transient(exc):
                raise _HandBack(first_line(exc)) from exc
            raise

    async def _write(self, call: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """A store call that writes: as :meth:`_db`, but on SQLite with a ``store_writer`` it
        runs in the writer while the event loop waits for it.

        On SQLite a write transaction holds the file's write lock, which the server processes'
        admissions wait for (docs/service.md, "Fairness"). Made in a thread beside a busy event
        loop, each of its SQLite calls waits for the loop to hand over the GIL (up to 5 ms
        each), and at the runner's ``nice`` the process waits for the CPU with the lock held: a
        save of 13 ms of CPU held the lock p99 239 ms. With the loop waiting (the job's
        verification stops for those milliseconds, the bulk work it is) and the writer thread
        at the server's priority (``service/runner.py``), the lock is held for the statements'
        own time. A wait for the lock stops the loop for ``LOOP_PAUSE`` at most; then the loop
        runs on while the writer waits.
        """
        writer = self._writer
        if writer is None:
            return await self._db(call, *args, **kwargs)

        async def attempt() -> _T:
            return await _settled(writer.submit(call, *args, **kwargs))

        try:
            return await retry_attempts(self.db_retry_seconds, attempt, call.__name__)
        except Exception as exc:
            if is_transient(exc):
                raise _HandBack(first_line(exc)) from exc
            raise

    async def _save(
        self,
        job_id: str,
        batch: list[tuple[str, VerificationResult]],
        claimer: str,
        duplicates: dict[str, int] | None,
    ) -> None:
        if self.feedback is not None:  # what mail sent to the list taught (docs/feedback.md)
            batch = await asyncio.to_thread(self.feedback.apply_results, batch)
        # serialised here, on the loop at the runner's priority; the writer only writes
        prepared = prepare_results(job_id, batch)
        await self._write(
            save_prepared, self.store, prepared, worker_id=claimer, duplicates=duplicates
        )

    async def _heartbeat(self, job_id: str, claimer: str) -> None:
        """Heartbeat the claim; return (which cancels the work) when it is lost."""
        interval = max(0.05, self.stale_after / 4)
        while True:
            await asyncio.sleep(interval)
            try:
                held = await self._beat(job_id, claimer)
            except Exception as exc:
                if is_transient(exc):  # the work's own store calls decide to hand the job back
                    log.warning("heartbeat of job %s failed: %s", job_id, exc)
                else:
                    log.exception("heartbeat of job %s failed", job_id)
                continue
            if not held:
                return

    async def _beat(self, job_id: str, claimer: str) -> bool:
        """One heartbeat, tried once (a write: in the writer on SQLite, as :meth:`_write`)."""
        if self._writer is None:
            return await asyncio.to_thread(heartbeat, self.store, job_id, claimer)
        return await _settled(self._writer.submit(heartbeat, self.store, job_id, claimer))


async def _settled(future: "Future[_T]") -> _T:
    """The writer's answer: waited for with the loop stopped for ``LOOP_PAUSE`` at most (the
    usual write), then with the loop running (a long wait for the lock)."""
    try:
        return future.result(timeout=LOOP_PAUSE)
    except TimeoutError:  # not done yet (or the call's own: the wrapped future raises it again)
        return await asyncio.wrap_future(future)
