"""Stopping a run from outside: an orchestrator killing its task (Airflow's ``on_kill``, a
Dagster run termination) stops the local engine at once and cancels or abandons the remote jobs
the run recorded, leaving its work folder for a resume (docs/deploy.md, "Cancelling a run").

- :class:`CancellableRun` runs one coroutine (``aclean``) on an event loop of this thread, and
  :meth:`~CancellableRun.cancel` may be called from a signal handler or another thread: the
  run's task is cancelled, the engine's SMTP sessions and DNS queries with it.
- :func:`recorded_jobs` reads the remote jobs a run has recorded in its work folder and not yet
  read; :func:`cancel_jobs` asks a form B service to delete each one
  (``DELETE /verify/bulk/{job_id}``, where the service offers it) and abandons form A's file
  jobs, which the form cannot cancel. A cancelled job is marked read in the work folder, so a
  resume submits its addresses again instead of waiting on a job that is gone; an abandoned job
  stays recorded, and a resume reads its results when it ends.

No orchestrator is imported here: the adapters call these functions.
"""

import asyncio
import json
import logging
import threading
from collections.abc import Coroutine, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from listhygiene.errors import first_line
from listhygiene.pipeline.backends import JobRef
from listhygiene.pipeline.workdir import WorkDir

if TYPE_CHECKING:
    from listhygiene.clients import ClientSettings

__all__ = [
    "ABANDONED",
    "CANCELLED",
    "CancellableRun",
    "RunCancelled",
    "cancel_jobs",
    "recorded_jobs",
]

log = logging.getLogger(__name__)
T = TypeVar("T")

#: What became of a remote job when its run was stopped.
CANCELLED: Literal["cancelled"] = "cancelled"
ABANDONED: Literal["abandoned"] = "abandoned"


class RunCancelled(Exception):
    """The run was stopped by :meth:`CancellableRun.cancel`; its work folder is kept."""


class CancellableRun:
    """One coroutine run to its end on this thread's own event loop, unless cancelled.

    ``cancel()`` is safe from a signal handler of this thread (Airflow calls ``on_kill`` from its
    SIGTERM handler) and from any other thread; before ``run()`` it makes ``run()`` refuse.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[Any] | None = None
        self.cancelled = False

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine``; :class:`RunCancelled` when :meth:`cancel` stopped it."""
        try:
            return asyncio.run(self._main(coroutine))
        except asyncio.CancelledError:
            if self.cancelled:
                raise RunCancelled("the run was cancelled; its work folder is kept") from None
            raise
        finally:
            with self._lock:
                self._loop = self._task = None

    def run_in_thread(self, coroutine: Coroutine[Any, Any, T], *, poll: float = 0.5) -> T:
        """Run ``coroutine`` on a worker thread while this thread waits for it. An exception
        raised in this thread while it waits (an orchestrator's interrupt: Dagster raises its
        run termination there, from a signal handler) cancels the run, waits for it to stop,
        and is raised again; it can never land inside one of the engine's own tasks."""
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["value"] = self.run(coroutine)
            except BaseException as exc:  # handed to the waiting thread
                box["error"] = exc

        worker = threading.Thread(target=target, name="listhygiene-run", daemon=True)
        worker.start()
        try:
            while worker.is_alive():
                worker.join(poll)
        except BaseException:
            self.cancel()
            worker.join()
            raise
        if "error" in box:
            raise box["error"]
        return box["value"]  # type: ignore[no-any-return]

    async def _main(self, coroutine: Coroutine[Any, Any, T]) -> T:
        with self._lock:
            if self.cancelled:
                coroutine.close()
                raise asyncio.CancelledError
            self._loop = asyncio.get_running_loop()
            self._task = asyncio.current_task()
        return await coroutine

    def cancel(self) -> None:
        """Cancel the running coroutine (its ``finally`` blocks run: connections close)."""
        with self._lock:
            self.cancelled = True
            loop, task = self._loop, self._task
        if loop is not None and task is not None and not loop.is_closed():
            # wakes the loop through its self-pipe, from a signal handler or another thread
            loop.call_soon_threadsafe(task.cancel)


def recorded_jobs(out: str) -> list[JobRef]:
    """The remote jobs recorded in ``out``'s work folder and not yet read (none for the local
    engine, whose jobs live in the run's own process)."""
    manifest = _manifest(WorkDir.for_output(str(out)).path)
    jobs = [JobRef.from_dict(e) for e in manifest.get("jobs", []) if not e.get("done")]
    return [job for job in jobs if job.backend in ("form-a", "form-b")]


async def cancel_jobs(
    out: str, jobs: Iterable[JobRef], settings: "ClientSettings"
) -> dict[str, str]:
    """Cancel (form B, when the service accepts ``DELETE``) or abandon (form A, or a form B
    service that refuses) each job; ``{job_id: "cancelled" | "abandoned"}``. Never raises for
    one job: a kill must not fail on a service that is down."""
    import dataclasses

    from listhygiene.clients import AsyncFormBClient
    from listhygiene.errors import BackendError

    outcome: dict[str, str] = {}
    cancelled: list[str] = []
    # one try, within the connect time-out: a kill must not wait on a service's retries
    quick = dataclasses.replace(
        settings, max_retries=0, timeout=settings.connect_timeout, max_wait=0.0
    )
    async with AsyncFormBClient(quick) as client:
        for job in jobs:
            outcome[job.job_id] = ABANDONED
            if job.backend != "form-b":
                log.info("form A job %s abandoned: the form cannot cancel a job", job.job_id)
                continue
            try:
                await client.cancel_bulk_job(job.job_id)
            except BackendError as exc:  # the service's answer, or no usable answer
                log.info("form B job %s abandoned: %s", job.job_id, first_line(exc))
                continue
            outcome[job.job_id] = CANCELLED
            cancelled.append(job.job_id)
    if cancelled:
        _forget(str(out), cancelled)
    return outcome


def _manifest(folder: Path) -> dict[str, Any]:
    try:
        data = json.loads((folder / "manifest.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _forget(out: str, job_ids: list[str]) -> None:
    """Mark cancelled jobs read: a resume submits their addresses again."""
    work = WorkDir.for_output(out)
    work.manifest = _manifest(work.path)
    if not work.manifest:
        return
    for entry in work.manifest.get("jobs", []):
        if entry.get("job_id") in job_ids:
            entry["done"] = True
    work.save()
