"""One SQLAlchemy engine per database URL, set up for several threads and several processes.

- ``postgresql://`` (and ``postgres://``) use psycopg 3. The pool pings a connection before
  handing it out (``pool_pre_ping``), so one whose backend was terminated while idle is replaced
  unseen; connecting gives up after :data:`PG_CONNECT_DEFAULTS` ``connect_timeout`` seconds and
  TCP keepalives notice a vanished server, so a partition is an error the job worker retries
  (``service/store/retry.py``), never a hang (docs/service.md, Faults). A URL's own parameters
  win.
- SQLite runs in WAL mode (readers do not block the writer), waits up to 30 s for a lock
  instead of failing (``connect_args={"timeout": seconds}`` sets another busy timeout),
  enforces foreign keys, and may be used from any thread. Python's sqlite3 module does not
  begin a transaction before DDL or before a read, so the engine takes over:
  every transaction starts with an explicit ``BEGIN``, and :func:`transaction` with
  ``write=True`` starts with ``BEGIN IMMEDIATE``, which takes the write lock at once. A
  transaction that reads and then writes must do that: in WAL mode a deferred one that finds
  another writer has committed since its read fails with "database is locked" at once, whatever
  the busy timeout. Within a process, writing transactions also queue on a lock of the engine
  before ``BEGIN IMMEDIATE``: threads then wait their turn on the lock and start the moment it
  is free, instead of in SQLite's busy handler, which sleeps up to 100 ms between tries (that
  sleeping made the p99 latency of a loaded server several times its p50). Across processes
  (the server processes and the job runner on one file) they then queue on an exclusive
  ``flock`` of a lock file beside the database, ``<db>.write-lock``: a waiting writer wakes the
  moment the holder's transaction ends. A wait for it is bounded by :data:`WRITE_LOCK_TIMEOUT`;
  past that (or where the file cannot be locked) the writer goes on to ``BEGIN IMMEDIATE`` and
  SQLite's busy timeout, the backstop for writers that do not take the lock (a deferred
  transaction that writes, another program). Readers take no lock (WAL). See
  docs/service.md, "Fairness".
"""

import contextlib
import logging
import os
import sqlite3
import sys
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.pool import StaticPool

try:
    import fcntl
except ImportError:  # Windows has no flock: writers of several processes meet in the busy handler
    fcntl = None  # type: ignore[assignment]

__all__ = ["make_engine", "normalize_url", "transaction"]

log = logging.getLogger(__name__)

BUSY_TIMEOUT_SECONDS = 30
#: The longest a writer waits for another process's write transaction at the lock file, in
#: seconds, before it leaves the wait to SQLite's busy timeout.
WRITE_LOCK_TIMEOUT = 30.0
#: The lock file's name: the database file's with this added.
WRITE_LOCK_SUFFIX = ".write-lock"
#: A folder named here when an engine is made: each SQLite write transaction of the process
#: appends ``<epoch> <pid> <nice> <caller> <wait ms> <hold ms>`` to ``<folder>/<pid>.txt``, how
#: long it waited for its turn and then held it (``benchmarks/fairness.py --lock-trace``).
LOCK_TRACE_VARIABLE = "LISTHYGIENE_SQLITE_LOCK_TRACE"
#: libpq parameters of every PostgreSQL connection unless the URL sets them: give up connecting
#: after 10 s; probe an idle connection after 30 s, every 10 s, 3 times (a dead peer is noticed
#: in about a minute, where the system's defaults take over two hours).
PG_CONNECT_DEFAULTS: dict[str, int] = {
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
}
_BEGIN = "listhygiene_sqlite_begin"


def normalize_url(url: str | URL) -> URL:
    """The URL with the driver the service uses: psycopg 3 for PostgreSQL."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def make_engine(url: str | URL, **kwargs: Any) -> Engine:
    """An engine for ``url`` (``sqlite:///path.db`` or ``postgresql://…``)."""
    parsed = normalize_url(url)
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(parsed, **kwargs)
    if parsed.drivername == "postgresql+psycopg":
        try:
            import psycopg  # noqa: F401
        except ImportError:
            raise ImportError(
                "PostgreSQL needs the psycopg driver: pip install 'psycopg[binary]'"
            ) from None
        connect_args = dict(kwargs.pop("connect_args", {}))
        for name, value in PG_CONNECT_DEFAULTS.items():
            if name not in parsed.query:
                connect_args.setdefault(name, value)
        kwargs["connect_args"] = connect_args
    kwargs.setdefault("pool_pre_ping", True)
    kwargs.setdefault("pool_size", 10)
    kwargs.setdefault("max_overflow", 20)
    return create_engine(parsed, **kwargs)


def _sqlite_engine(url: URL, **kwargs: Any) -> Engine:
    if sqlite3.sqlite_version_info < (3, 35):
        raise RuntimeError(
            f"SQLite {sqlite3.sqlite_version} is too old: the store needs 3.35 or later (RETURNING)"
        )
    connect_args = kwargs.pop("connect_args", {})
    connect_args.setdefault("check_same_thread", False)
    connect_args.setdefault("timeout", BUSY_TIMEOUT_SECONDS)
    if url.database in (None, "", ":memory:"):
        # One shared connection, or every connection would see its own empty database. Meant
        # for tests in one thread: threads would share that connection's transaction.
        kwargs.setdefault("poolclass", StaticPool)
    busy_ms = int(float(connect_args["timeout"]) * 1000)
    engine = create_engine(url, connect_args=connect_args, **kwargs)
    with _LOCKS_LOCK:
        _WRITE_LOCKS[engine] = _WriteLock(_lock_path(url))

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # no implicit BEGIN: see _on_begin
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {busy_ms}")
        _use_wal(cursor)
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        connection.exec_driver_sql(connection.get_execution_options().get(_BEGIN, "BEGIN"))

    return engine


def _use_wal(cursor: Any) -> None:
    """Switch the file to WAL once. Switching takes an exclusive lock that the busy timeout does
    not always wait for (two processes opening a new file at once), so retry briefly."""
    deadline = time.monotonic() + BUSY_TIMEOUT_SECONDS
    while True:
        try:
            if cursor.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@contextmanager
def transaction(engine: Engine, *, write: bool = False) -> Iterator[Connection]:
    """A connection in a transaction, committed on success and rolled back on error.

    ``write=True`` for a transaction that writes after reading: on SQLite it takes the write lock
    first (``BEGIN IMMEDIATE``); PostgreSQL needs nothing more than its row locks.
    """
    if not (write and engine.dialect.name == "sqlite"):
        with engine.connect() as connection, connection.begin():
            yield connection
        return
    with _write_lock(engine).held(), engine.connect() as connection:
        connection.execution_options(**{_BEGIN: "BEGIN IMMEDIATE"})
        with connection.begin():
            yield connection


class _WriteLock:
    """The turn of this process's writers on one SQLite file: a lock of its threads, then (for
    the outermost transaction of the thread holding it) the lock file shared with other
    processes, released after the commit or rollback."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._threads = threading.RLock()
        self._depth = 0
        self._fd: int | None = None
        self._trace = os.environ.get(LOCK_TRACE_VARIABLE) or None

    @contextmanager
    def held(self) -> Iterator[None]:
        asked = time.perf_counter()
        with self._threads:
            outermost = self._depth == 0
            if outermost and self.path is not None:
                self._fd = self._lock_file(self.path)
            got = time.perf_counter()
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0 and self._fd is not None:
                    fd, self._fd = self._fd, None
                    _unlock(fd)
                if self._trace and outermost:
                    _trace_line(self._trace, asked, got, time.perf_counter())

    def _lock_file(self, path: Path) -> int | None:
        """A descriptor of ``path`` holding its exclusive lock; None to leave the wait to
        SQLite (the lock not had within :data:`WRITE_LOCK_TIMEOUT`, or not available here)."""
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            log.warning(
                "SQLite writers queue in the busy handler, %s cannot be opened: %s", path, exc
            )
            self.path = None  # once per engine
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            pass
        except OSError as exc:
            os.close(fd)
            log.warning(
                "SQLite writers queue in the busy handler, %s cannot be locked: %s", path, exc
            )
            self.path = None
            return None
        return _wait_for_lock(fd, WRITE_LOCK_TIMEOUT)


def _wait_for_lock(fd: int, timeout: float) -> int | None:
    """Wait up to ``timeout`` seconds for the exclusive lock of ``fd``: ``fd`` holding it, or
    None (``fd`` then belongs to the waiting thread, which lets go of both when it gets the
    lock). ``flock`` cannot time out, so a thread of its own waits in it."""
    got = threading.Event()
    guard = threading.Lock()
    abandoned = False

    def wait() -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            os.close(fd)
            return
        with guard:
            if abandoned:
                _unlock(fd)
                return
            got.set()

    threading.Thread(target=wait, name="sqlite-write-lock", daemon=True).start()
    if got.wait(timeout):
        return fd
    with guard:
        if got.is_set():
            return fd
        abandoned = True
    log.warning(
        "a SQLite write waited %.0f s for another process's; trying without its turn", timeout
    )
    return None


def _trace_line(folder: str, asked: float, got: float, done: float) -> None:
    """Append one write transaction's wait and hold to ``<folder>/<pid>.txt`` (see
    :data:`LOCK_TRACE_VARIABLE`)."""
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename in _NOT_CALLERS:
        frame = frame.f_back
    line = (
        f"{time.time():.6f} {os.getpid()} {os.getpriority(os.PRIO_PROCESS, 0)} "
        f"{frame.f_code.co_name} {(got - asked) * 1000:.3f} {(done - got) * 1000:.3f}\n"
    )
    with contextlib.suppress(OSError), open(os.path.join(folder, f"{os.getpid()}.txt"), "a") as out:
        out.write(line)


def _unlock(fd: int) -> None:
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def _lock_path(url: URL) -> Path | None:
    """``<db>.write-lock`` beside a database file; None for memory or where there is no flock."""
    database = url.database
    if fcntl is None or database in (None, "", ":memory:") or database.startswith("file:"):
        return None
    return Path(os.path.abspath(database + WRITE_LOCK_SUFFIX))


#: Files whose frames are the lock's own, not the caller of a transaction.
_NOT_CALLERS = frozenset({__file__, contextlib.__file__})

_WRITE_LOCKS: "weakref.WeakKeyDictionary[Engine, _WriteLock]" = weakref.WeakKeyDictionary()
_LOCKS_LOCK = threading.Lock()


def _write_lock(engine: Engine) -> _WriteLock:
    """The turn of this process's writing transactions on ``engine`` (a SQLite file)."""
    with _LOCKS_LOCK:
        lock = _WRITE_LOCKS.get(engine)
        if lock is None:  # an engine not made here: its threads take turns, not the processes
            lock = _WRITE_LOCKS[engine] = _WriteLock(None)
        return lock
