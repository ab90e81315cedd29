"""The warm worker: GX imported ahead of the checks, off the run's critical path.

GX takes seconds to import (docs/pipeline.md, "Speed"); :func:`warm_up` imports it in a child
process at the start of a run, so the import costs neither the critical path nor the pipeline's
CPU (a thread would hold the GIL while it imports), and the checks then run in that child
(:func:`_serve`). If the child dies, the checks run in the parent instead.
``warm_up(process=False)`` imports GX in a thread of this process instead, and the checks run
here; ``clean`` takes the thread when :data:`WORKER_VARIABLE` says ``thread``.
"""

import atexit
import logging
import os
import pickle
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, BinaryIO

from listhygiene.pipeline.quality.checks import _check_outputs_here
from listhygiene.pipeline.quality.deferred import lighten_gx_import
from listhygiene.pipeline.quality.results import QualityReport
from listhygiene.pipeline.quality.suite import _import_gx, gx_missing

#: The package's logger, as before the package was split: the CLI's log lines name it.
log = logging.getLogger("listhygiene.pipeline.quality")

#: ``process`` (the default) or ``thread``: where :func:`warm_up` imports GX when the caller does
#: not say (docs/pipeline.md, "Quality checks"). ``thread`` suits many short runs in one process
#: (a notebook, a test suite): GX is imported once, not once per run.
WORKER_VARIABLE = "LISTHYGIENE_QUALITY_WORKER"


def default_worker_kind() -> str:
    """``process`` or ``thread``, from :data:`WORKER_VARIABLE`; a wrong value is a config error."""
    kind = os.environ.get(WORKER_VARIABLE, "process").strip().lower() or "process"
    if kind not in ("process", "thread"):
        from listhygiene.errors import ConfigurationError

        raise ConfigurationError(f"{WORKER_VARIABLE}={kind!r}: expected 'process' or 'thread'")
    return kind


#: The checks' child a command started ahead of its run (:func:`start_early`), until the run's
#: :func:`warm_up` takes it.
_early: "QualityWorker | None" = None


def start_early() -> None:
    """Start the checks' child now, for the run this process is about to start.

    ``listhygiene clean`` calls it before it imports the pipeline, so that GX's import (a small
    list's whole length) overlaps the command's own imports and set-up too (docs/pipeline.md,
    "Small lists"); the run's :func:`warm_up` takes the child. A process that never runs (an
    error before it) stops the child at exit. With :data:`WORKER_VARIABLE` set to ``thread``
    nothing starts.
    """
    from listhygiene.errors import ConfigurationError

    global _early
    try:
        kind = default_worker_kind()
    except ConfigurationError:
        return  # the run stops on it, as the usage error it is
    if _early is None and kind == "process":
        _early = QualityWorker(process=True)
        atexit.register(_stop_early)


def _stop_early() -> None:
    global _early
    early, _early = _early, None
    if early is not None:
        early.close()


def warm_up(*, process: bool = True) -> "QualityWorker":
    """Start importing GX now, in the background, and return the worker that runs the checks.

    Call it when a run starts; pass the worker to
    :func:`~listhygiene.pipeline.quality.check_outputs` and close it when the run ends (or use
    it as a context manager). With ``process`` (the default) GX is imported in a child process,
    which takes the other core's time, not the run's: a thread importing GX holds the GIL for
    seconds. The child costs more memory, though (its own pandas and pyarrow:
    ~270 MiB with GX against ~140 MiB for GX in this process); ``process=False`` imports in a
    thread and checks here. docs/pipeline.md ("Quality checks") has the figures. A child
    started ahead by :func:`start_early` is taken (or, for a thread, stopped).
    """
    global _early
    early, _early = _early, None
    if early is not None:
        if process:
            return early
        early.close()
    return QualityWorker(process=process)


class QualityWorker:
    """Where GX is imported ahead of the checks: a child Python process that runs
    :func:`~listhygiene.pipeline.quality.check_outputs` for the parent, one call at a time (if
    it dies, the checks run in the parent instead), or a thread of this process
    (``process=False``)."""

    def __init__(self, *, process: bool = True) -> None:
        #: GX's import time, once the import has finished (:meth:`wait_ready`).
        self.import_seconds: float | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None
        if gx_missing() is not None:  # nothing to import: check_outputs says the checks skipped
            return
        if process:
            code = "from listhygiene.pipeline.quality.worker import _serve; _serve()"
            self._process = subprocess.Popen(
                [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE
            )
        else:
            self._thread = threading.Thread(
                target=self._import_here, name="listhygiene-gx-import", daemon=True
            )
            self._thread.start()

    def _import_here(self) -> None:
        started = time.perf_counter()
        _import_gx()
        self.import_seconds = time.perf_counter() - started

    def wait_ready(self) -> bool:
        """Wait until GX is imported; False when the child is gone (the checks then run here)."""
        if self._thread is not None:
            self._thread.join()
            return True
        process = self._process
        if self.import_seconds is not None:
            return process is not None
        if process is None or process.stdout is None:
            return False
        try:
            answer, value = pickle.load(process.stdout)
        except (OSError, EOFError, pickle.PickleError) as exc:
            log.warning("the quality checks' process failed (%s); checking here instead", exc)
            self.close()
            return False
        self.import_seconds = float(value)
        return bool(answer == "ready")

    def check_outputs(self, files: Mapping[str, str], **options: Any) -> QualityReport:
        """:func:`~listhygiene.pipeline.quality.check_outputs` where GX was imported; raises
        what it raises."""
        return self.begin(files, **options)()

    def begin(self, files: Mapping[str, str], **options: Any) -> Callable[[], QualityReport]:
        """:meth:`check_outputs` sent now, waited for later: the child starts on the checks as
        soon as its import is done, and the run does the rest of its own work meanwhile (the
        report's template: docs/pipeline.md, "Small lists"). Call what it returns for the
        report (or the error). In a thread, or with the child gone, the checks run then."""
        process = self._process
        if process is not None and process.stdin is not None and process.poll() is None:
            try:
                pickle.dump((dict(files), options), process.stdin)
                process.stdin.flush()
            except (OSError, pickle.PickleError) as exc:
                log.warning("the quality checks' process failed (%s); checking here instead", exc)
                self.close()
            else:
                return lambda: self._answer(files, options)
        return lambda: self._here(files, options)

    def _answer(self, files: Mapping[str, str], options: dict[str, Any]) -> QualityReport:
        ready = self.wait_ready()
        process = self._process
        if ready and process is not None and process.stdout is not None:
            try:
                answer, value = pickle.load(process.stdout)
            except (OSError, EOFError, pickle.PickleError) as exc:
                log.warning("the quality checks' process failed (%s); checking here instead", exc)
                self.close()
            else:
                if answer == "error":
                    raise value
                return value  # type: ignore[no-any-return]
        return _check_outputs_here(files, **options)

    def _here(self, files: Mapping[str, str], options: dict[str, Any]) -> QualityReport:
        self.wait_ready()  # a thread's import finished (a gone child: nothing to wait for)
        return _check_outputs_here(files, **options)

    def close(self) -> None:
        """Stop the child, even in the middle of GX's import."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.kill()
        process.wait()
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()

    def __enter__(self) -> "QualityWorker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


def _serve(requests: BinaryIO | None = None, answers: BinaryIO | None = None) -> None:
    """The child's loop: import GX, then answer ``(files, options)`` requests until EOF."""
    if answers is None:
        # the answers use the real stdout; anything printed (by GX or a library) goes to stderr
        answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
        os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    requests = requests or sys.stdin.buffer
    started = time.perf_counter()
    lighten_gx_import()  # this process is ours: what GX imports for nothing stays out
    _import_gx()
    pickle.dump(("ready", time.perf_counter() - started), answers)
    answers.flush()
    while True:
        try:
            files, options = pickle.load(requests)
        except EOFError:
            return
        try:
            answer: tuple[str, Any] = ("ok", _check_outputs_here(files, **options))
        except Exception as exc:  # the caller raises it; unpicklable ones as RuntimeError
            answer = ("error", exc)
            try:
                pickle.dumps(exc)
            except Exception:
                answer = ("error", RuntimeError(f"{type(exc).__name__}: {exc}"))
        pickle.dump(answer, answers)
        answers.flush()
