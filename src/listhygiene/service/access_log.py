"""uvicorn's access log without query strings (docs/security.md).

A client that puts its API key in a query string (``?api_key=...``) by mistake must not have it
written to the server's log, where it outlives the request and reaches whoever reads logs. The
access log keeps the method, the path, the status and the client; never the query.

The access log is written off the request path (:class:`BackgroundStreamHandler`): a request only
queues its record; a thread of the handler formats the records waiting and writes them with one
write (docs/service.md, "Speed").
"""

import collections
import contextlib
import copy
import logging
import threading
from typing import Any, TextIO

__all__ = ["BackgroundStreamHandler", "WithoutQueryString", "log_config"]


class BackgroundStreamHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler whose records are formatted and written by a thread of its own, all the
    records that arrived since its last write at once: a busy server writes its access log in a
    few large writes instead of one write and flush per request, and the event loop only
    appends to a queue. Records are written in order; what is queued is written at ``flush``
    and ``close`` (so at exit)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        super().__init__(stream)
        self._queued: collections.deque[logging.LogRecord] = collections.deque()
        self._waiting = threading.Event()
        self._writing = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="access-log", daemon=True)
        self._thread.start()

    def emit(self, record: logging.LogRecord) -> None:
        self._queued.append(record)
        self._waiting.set()

    def _run(self) -> None:
        while True:
            self._waiting.wait()
            self._waiting.clear()
            self._write_queued()

    def _write_queued(self) -> None:
        with self._writing:
            lines = []
            while self._queued:
                record = self._queued.popleft()
                try:
                    lines.append(self.format(record) + self.terminator)
                except Exception:
                    self.handleError(record)
            if lines:
                # a closed or broken stream drops the lines; the server goes on
                with contextlib.suppress(OSError, ValueError):
                    self.stream.write("".join(lines))
                    self.stream.flush()

    def flush(self) -> None:
        self._write_queued()

    def close(self) -> None:
        self._write_queued()
        super().close()


class WithoutQueryString(logging.Filter):
    """Cuts the query string off the path of uvicorn's access records."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            path = args[2].split("?", 1)[0]
            record.args = (*args[:2], path, *args[3:])
        return True


def log_config() -> dict[str, Any]:
    """uvicorn's own logging configuration, with :class:`WithoutQueryString` on the access log."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["without_query"] = {"()": f"{__name__}.WithoutQueryString"}
    config["handlers"]["access"].setdefault("filters", []).append("without_query")
    config["handlers"]["access"]["class"] = f"{__name__}.BackgroundStreamHandler"
    return config
