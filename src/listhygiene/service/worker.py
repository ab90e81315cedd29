"""The background worker of jobs (form A file jobs, form B bulk jobs), started and stopped with
the server.

It polls the store for a job to claim (and is woken at once by a submission), verifies the job's
pending addresses with the engine, writes the results in batches (every ``batch_size`` results or
``flush_seconds``), heartbeats meanwhile, and settles the job. It runs up to ``slots`` jobs at
once, so that a large job does not hold up a small one behind it; they share the engine, whose
per-host limits keep the mail hosts' load polite whatever the number of jobs. The store is
synchronous, so its calls run in threads.

Several workers (in one process or several) share the jobs through the store's claims; a job
whose worker died is claimed again after ``stale_after`` seconds and resumes with only the
addresses that have no result, so nothing is verified or charged twice.
"""

import asyncio
import contextlib
import logging
import os
import time
from typing import Any

from listhygiene.results import VerificationResult
from listhygiene.service.store import Store
from listhygiene.service.store.jobs import (
    LostClaim,
    StoredJob,
    claim_job,
    fail_job,
    finish_job,
    heartbeat,
    pending_addresses,
    release_job,
    save_results,
)
from listhygiene.service.store.models import new_id

__all__ = ["JobWorker"]

log = logging.getLogger(__name__)


#: A failed job's error code, in its form's words.
_FAILURE_CODES = {"a": "1000", "b": "INTERNAL_ERROR"}


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
    ) -> None:
        self.store = store
        self.engine = engine
        self.poll_seconds = poll_seconds
        self.stale_after = stale_after
        self.slots = max(1, slots)
        self.batch_size = batch_size
        self.flush_seconds = flush_seconds
        self.worker_id = worker_id or f"{os.getpid()}-{new_id()}"
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
            asyncio.create_task(self._run(), name=f"job-worker-{self.worker_id}-{slot}")
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

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            try:
                job = await asyncio.to_thread(
                    claim_job, self.store, self.worker_id, stale_after=self.stale_after
                )
            except Exception:
                log.exception("claiming a job failed")
                job = None
            if job is not None:
                await self._process(job)
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.poll_seconds)
            # Every idle slot was woken by set(); the first to get here clears it for the next.
            self._wake.clear()

    async def _process(self, job: StoredJob) -> None:
        work = asyncio.create_task(self._work(job))
        beat = asyncio.create_task(self._heartbeat(job.id))
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

    async def _work(self, job: StoredJob) -> None:
        buffer: list[tuple[str, VerificationResult]] = []
        try:
            pending = await asyncio.to_thread(pending_addresses, self.store, job.id)
            last = time.monotonic()
            async for given, result in self.engine.verify_each(pending, check_smtp=job.check_smtp):
                buffer.append((str(given), result))
                if len(buffer) >= self.batch_size or time.monotonic() - last >= self.flush_seconds:
                    batch, buffer = buffer, []
                    await self._save(job.id, batch)
                    last = time.monotonic()
            batch, buffer = buffer, []
            await self._save(job.id, batch)
            await asyncio.to_thread(finish_job, self.store, job.id, self.worker_id)
        except LostClaim:
            log.warning("job %s was taken over by another worker", job.id)
        except asyncio.CancelledError:
            if self._release:
                # A clean stop: keep what is verified and give the job back for a restart.
                # Synchronous (quick statements): an await could be cancelled in turn.
                with contextlib.suppress(Exception):
                    if buffer:
                        save_results(self.store, job.id, buffer, worker_id=self.worker_id)
                    release_job(self.store, job.id, self.worker_id)
            raise
        except Exception as exc:
            log.exception("job %s failed", job.id)
            with contextlib.suppress(Exception):
                await asyncio.to_thread(
                    fail_job,
                    self.store,
                    job.id,
                    _FAILURE_CODES[job.form],
                    f"Verification failed ({type(exc).__name__})",
                    self.worker_id,
                )

    async def _save(self, job_id: str, batch: list[tuple[str, VerificationResult]]) -> None:
        await asyncio.to_thread(save_results, self.store, job_id, batch, worker_id=self.worker_id)

    async def _heartbeat(self, job_id: str) -> None:
        """Heartbeat the claim; return (which cancels the work) when it is lost."""
        interval = max(0.05, self.stale_after / 4)
        while True:
            await asyncio.sleep(interval)
            try:
                held = await asyncio.to_thread(heartbeat, self.store, job_id, self.worker_id)
            except Exception:
                log.exception("heartbeat of job %s failed", job_id)
                continue
            if not held:
                return
