"""One SQLAlchemy engine per database URL, set up for several threads and several processes.

- ``postgresql://`` (and ``postgres://``) use psycopg 3. The pool pings a connection before
  handing it out (``pool_pre_ping``), so one whose backend was terminated while idle is replaced
  unseen; connecting gives up after :data:`PG_CONNECT_DEFAULTS` ``connect_timeout`` seconds and
  TCP keepalives notice a vanished server, so a partition is an error the job worker retries
  (``service/store/retry.py``), never a hang (docs/service.md, Faults). A URL's own parameters
  win.
- SQLite runs in WAL mode (readers do not block the writer), waits up to 30 s for a lock
  instead of failing, enforces foreign keys, and may be used from any thread. Python's sqlite3
  module does not begin a transaction before DDL or before a read, so the engine takes over:
  every transaction starts with an explicit ``BEGIN``, and :func:`transaction` with
  ``write=True`` starts with ``BEGIN IMMEDIATE``, which takes the write lock at once. A
  transaction that reads and then writes must do that: in WAL mode a deferred one that finds
  another writer has committed since its read fails with "database is locked" at once, whatever
  the busy timeout. Within a process, writing transactions also queue on a lock of the engine
  before ``BEGIN IMMEDIATE``: threads then wait their turn on the lock and start the moment it
  is free, instead of in SQLite's busy handler, which sleeps up to 100 ms between tries (that
  sleeping made the p99 latency of a loaded server several times its p50). Other processes on
  the same file still meet in the busy handler.
"""

import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.pool import StaticPool

__all__ = ["make_engine", "normalize_url", "transaction"]

BUSY_TIMEOUT_SECONDS = 30
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
    engine = create_engine(url, connect_args=connect_args, **kwargs)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # no implicit BEGIN: see _on_begin
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_SECONDS * 1000}")
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
    with _writer_lock(engine), engine.connect() as connection:
        connection.execution_options(**{_BEGIN: "BEGIN IMMEDIATE"})
        with connection.begin():
            yield connection


_WRITER_LOCKS: "weakref.WeakKeyDictionary[Engine, threading.RLock]" = weakref.WeakKeyDictionary()
_LOCKS_LOCK = threading.Lock()


def _writer_lock(engine: Engine) -> threading.RLock:
    """The lock this process's writing transactions on ``engine`` (a SQLite file) take turns on."""
    with _LOCKS_LOCK:
        lock = _WRITER_LOCKS.get(engine)
        if lock is None:
            lock = _WRITER_LOCKS[engine] = threading.RLock()
        return lock
