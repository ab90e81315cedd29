"""The job runner: the process of ``listhygiene serve`` that runs jobs and delivers webhooks.

The server processes (uvicorn's, one or ``--workers N``) only admit requests and read the store:
a submitted job is written to the store and left there. One runner process per ``serve`` claims
the jobs from the store (``store/jobs.py``: ``FOR UPDATE SKIP LOCKED`` on PostgreSQL, ``BEGIN
IMMEDIATE`` on SQLite), verifies them with its own engine and delivers the webhook outbox. So a
big job's CPU work (parsing answers, building results, writing them) never holds the GIL of a
process that answers requests, and another key's single verification waits for no job
(docs/service.md, "Fairness").

The runner lives and dies with its ``serve``: it is started by :class:`JobRunner` (which starts
it again if it exits on its own), stopped with SIGTERM (its jobs released for a restart), and
killed by the kernel when its ``serve`` dies (``PR_SET_PDEATHSIG``, or else its parent watched),
so a SIGKILLed server leaves no runner behind to hold its jobs: they go stale and another server
resumes them (docs/service.md, "Faults").

``python -m listhygiene.service.runner`` with the configuration of ``serve`` in
``LISTHYGIENE_SERVE_CONFIG`` and the parent's pid in ``LISTHYGIENE_RUNNER_PARENT``.
"""

import asyncio
import contextlib
import ctypes
import gc
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import Executor, ThreadPoolExecutor

from listhygiene.service.factory import CONFIG_VARIABLE, ServeConfig, open_feedback

__all__ = ["PARENT_VARIABLE", "JobRunner", "main", "run_jobs"]

log = logging.getLogger(__name__)

PARENT_VARIABLE = "LISTHYGIENE_RUNNER_PARENT"
#: How much lower the runner's CPU priority is than the server processes' (``nice``).
RUNNER_NICENESS = 10
#: Seconds a stopping runner has to release its jobs before it is killed.
STOP_SECONDS = 15.0
#: Seconds between two checks that the parent is still there (where the kernel cannot tell).
_PARENT_POLL_SECONDS = 0.5
#: Seconds to wait before starting a runner that exited on its own again, at most.
_RESTART_MAX_SECONDS = 30.0
_PR_SET_PDEATHSIG = 1


class JobRunner:
    """Starts the runner process of ``config`` and keeps it running until :meth:`stop`."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self._process: subprocess.Popen[bytes] | None = None
        self._stopping = threading.Event()
        self._started = threading.Event()
        self._thread: threading.Thread | None = None
        # held while a process is started, so that stop() never misses one started meanwhile
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None else None

    def start(self) -> None:
        """Start the runner (returns once its process exists)."""
        # One thread starts and watches the process: the kernel's parent-death signal is tied to
        # the thread that started the child, so that thread must live as long as ``serve``.
        self._thread = threading.Thread(target=self._supervise, name="job-runner", daemon=True)
        self._thread.start()
        self._started.wait(30)

    def stop(self) -> None:
        """Stop the runner: SIGTERM (its jobs released), SIGKILL after :data:`STOP_SECONDS`."""
        with self._lock:
            self._stopping.set()
            process = self._process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                log.warning("the job runner did not stop in %.0f s: killed", STOP_SECONDS)
                process.kill()
                process.wait()
        if self._thread is not None:
            self._thread.join(5)

    def _spawn(self) -> subprocess.Popen[bytes]:
        environment = {
            **os.environ,
            CONFIG_VARIABLE: self.config.to_json(),
            PARENT_VARIABLE: str(os.getpid()),
        }
        return subprocess.Popen(
            [sys.executable, "-m", "listhygiene.service.runner"], env=environment
        )

    def _supervise(self) -> None:
        wait = 1.0
        while True:
            started = time.monotonic()
            with self._lock:
                try:
                    if self._stopping.is_set():
                        return
                    process = self._process = self._spawn()
                finally:
                    self._started.set()
            code = process.wait()
            if self._stopping.is_set():
                return
            if time.monotonic() - started > 60:
                wait = 1.0  # it ran for a while: a new failure, not a crash loop
            log.error("the job runner exited (status %s); starting it again in %.0f s", code, wait)
            if self._stopping.wait(wait):
                return
            wait = min(wait * 2, _RESTART_MAX_SECONDS)


def _die_with_parent(parent: int) -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux), as if it had been
    killed with it; the parent is also watched in :func:`run_jobs` where that is not possible."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the request above
        os._exit(1)


async def run_jobs(
    config: ServeConfig, *, parent: int | None = None, store_writer: Executor | None = None
) -> None:
    """Run the job worker and the webhook outbox of ``config`` until SIGTERM or SIGINT; with
    ``parent``, die at once (releasing nothing, like a killed server) when that process is
    gone. ``store_writer``: the thread the worker's SQLite writes run in (see :func:`main`)."""
    from listhygiene.engine import Engine, EngineSettings
    from listhygiene.service.outbox import Outbox
    from listhygiene.service.store import Store
    from listhygiene.service.worker import JobWorker

    store = Store(config.db, migrate=False)  # serve migrated it before starting this
    engine = Engine(EngineSettings(**config.engine))
    worker = JobWorker(
        store,
        engine,
        store_writer=store_writer,
        feedback=open_feedback(config.feedback),
        **config.worker,
    )
    outbox = Outbox(
        store, allow_http=config.allow_http_webhooks, allow_private=config.allow_private_webhooks
    )
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, stopping.set)
    gc.collect()
    gc.freeze()  # as the server processes do (factory.py)
    await worker.start()
    await outbox.start()
    log.info("job runner %d started (%d job slots)", os.getpid(), worker.slots)
    try:
        while not stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), _PARENT_POLL_SECONDS)
            if parent is not None and os.getppid() != parent:
                os._exit(1)
    finally:
        await outbox.stop()
        await worker.stop(release=True)
        await engine.aclose()  # the shared host state's connection (--shared-limits)
        store.close()


def main() -> None:
    """The runner process's entry point."""
    text = os.environ.get(CONFIG_VARIABLE)
    if not text:
        sys.exit(f"{CONFIG_VARIABLE} is not set: the job runner is started by listhygiene serve")
    parent = int(os.environ.get(PARENT_VARIABLE) or 0) or None
    if parent is not None:
        _die_with_parent(parent)
    # The thread of the job worker's SQLite writes, started first: at the server processes'
    # priority, so that a write holding the lock they wait for is not left waiting for the CPU
    # (on Linux a thread's nice value is its own, and a new thread inherits its creator's).
    store_writer = ThreadPoolExecutor(1, thread_name_prefix="listhygiene-store-writer")
    store_writer.submit(lambda: None).result()
    # The rest below the server processes in the CPU's queue, from its first import on: on a
    # busy machine a request (or a server starting) goes first, a job takes what is left
    # (docs/service.md, "Fairness").
    with contextlib.suppress(OSError, AttributeError):
        os.nice(RUNNER_NICENESS)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s:     [jobs] %(message)s")
    logging.getLogger("listhygiene").setLevel(logging.INFO)
    config = ServeConfig.from_json(text)
    try:
        import uvloop
    except ImportError:  # a dependency where it builds (pyproject.toml); else asyncio's loop
        asyncio.run(run_jobs(config, parent=parent, store_writer=store_writer))
    else:
        uvloop.run(run_jobs(config, parent=parent, store_writer=store_writer))


if __name__ == "__main__":
    main()
