"""A durable log of received webhook events in a SQLite file, shared by processes and threads.

The :class:`~listhygiene.clients.receiver.WebhookReceiver` records each verified delivery here;
whatever waits for a remote job (a pipeline step, an Airflow trigger in another process) reads
it with :meth:`EventStore.find` or :meth:`EventStore.wait`. A delivery is recorded once: rows are
keyed by the event's identity (the digest of its payload's canonical JSON), so a retry, a replay
or a re-serialised copy of the same event is a no-op.

Only the standard library: every call opens its own short-lived connection (WAL mode, with a
busy time-out), so one store may be used from several threads and processes at once.
"""

import asyncio
import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

__all__ = ["Event", "EventStore"]

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS webhook_events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        digest TEXT NOT NULL UNIQUE,
        form TEXT NOT NULL,
        event TEXT NOT NULL,
        job_id TEXT NOT NULL,
        payload TEXT NOT NULL,
        received_at REAL NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS webhook_events_job ON webhook_events (job_id, event, id)",
)
_COLUMNS = "id, form, event, job_id, payload, received_at"


@dataclass(frozen=True)
class Event:
    """One recorded delivery: ``payload`` is the whole JSON body as received."""

    id: int
    form: str
    event: str
    job_id: str
    payload: dict[str, Any] = field(hash=False)
    received_at: datetime

    @property
    def data(self) -> dict[str, Any]:
        """The payload's ``data`` object."""
        data = self.payload.get("data")
        return data if isinstance(data, dict) else {}


def _event(row: tuple[Any, ...]) -> Event:
    id_, form, event, job_id, payload, received_at = row
    return Event(
        id=int(id_),
        form=str(form),
        event=str(event),
        job_id=str(job_id),
        payload=json.loads(payload),
        received_at=datetime.fromtimestamp(float(received_at), UTC),
    )


def _names(events: Iterable[str] | None) -> tuple[str, ...] | None:
    if events is None:
        return None
    if isinstance(events, str):  # one name, not its characters
        return (events,)
    return tuple(events)


class EventStore:
    """Received webhook events in the SQLite file at ``path`` (created if missing; its directory
    must exist). ``busy_timeout`` is how long (seconds) a call waits for another writer's lock
    before ``sqlite3.OperationalError``."""

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = 30.0) -> None:
        self.path = os.fspath(path)
        self.busy_timeout = busy_timeout
        with self._connect() as conn:
            conn.execute("PRAGMA journal_mode=WAL")  # persistent: a property of the file
            for statement in _SCHEMA:
                conn.execute(statement)

    def __repr__(self) -> str:
        return f"EventStore({self.path!r})"

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        # Autocommit (isolation_level None): each statement below is its own transaction.
        conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
        try:
            conn.execute("PRAGMA synchronous=NORMAL")  # durable with WAL, fewer fsyncs
            yield conn
        finally:
            conn.close()

    def record(
        self,
        form: str,
        event: str,
        job_id: str,
        payload: dict[str, Any],
        digest: str,
        *,
        received_at: float | None = None,
    ) -> bool:
        """Record one delivery; False when a delivery of this ``digest`` is already recorded.

        ``digest`` identifies the event (the receiver uses the SHA-256 of the payload in form B's
        canonical JSON without its ``signature``: the same for a retry, a replay and a body
        re-serialised on its way). ``received_at``: Unix seconds, default now.
        """
        moment = time.time() if received_at is None else received_at
        with self._connect() as conn:
            cursor = conn.execute(
                "INSERT OR IGNORE INTO webhook_events"
                " (digest, form, event, job_id, payload, received_at) VALUES (?, ?, ?, ?, ?, ?)",
                (digest, form, event, job_id, json.dumps(payload, ensure_ascii=False), moment),
            )
            return cursor.rowcount == 1

    def find(self, job_id: str, events: Iterable[str] | None = None) -> Event | None:
        """The latest recorded event of ``job_id`` (among ``events`` if given), or None."""
        names = _names(events)
        sql = f"SELECT {_COLUMNS} FROM webhook_events WHERE job_id = ?"
        params: list[Any] = [job_id]
        if names is not None:
            if not names:
                return None
            sql += f" AND event IN ({', '.join('?' * len(names))})"
            params.extend(names)
        sql += " ORDER BY id DESC LIMIT 1"
        with self._connect() as conn:
            row = conn.execute(sql, params).fetchone()
        return _event(row) if row is not None else None

    def events(self, since_id: int = 0, *, limit: int | None = None) -> list[Event]:
        """The events recorded after the one of id ``since_id``, oldest first."""
        sql = f"SELECT {_COLUMNS} FROM webhook_events WHERE id > ? ORDER BY id"
        params: list[Any] = [since_id]
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        with self._connect() as conn:
            return [_event(row) for row in conn.execute(sql, params).fetchall()]

    async def wait(
        self,
        job_id: str,
        events: Iterable[str] | None,
        timeout: float,  # noqa: ASYNC109 - a deadline of the wait itself, also in wait_sync
        poll: float = 0.5,
    ) -> Event:
        """The latest event of ``job_id`` among ``events``, once there is one (it may have been
        recorded before the call); ``TimeoutError`` after ``timeout`` seconds without."""
        names = _names(events)
        deadline = time.monotonic() + timeout
        while True:
            found = await asyncio.to_thread(self.find, job_id, names)
            if found is not None:
                return found
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(_timed_out(job_id, names, timeout))
            await asyncio.sleep(min(poll, left))

    def wait_sync(
        self,
        job_id: str,
        events: Iterable[str] | None,
        timeout: float,
        poll: float = 0.5,
    ) -> Event:
        """:meth:`wait`, blocking the calling thread."""
        names = _names(events)
        deadline = time.monotonic() + timeout
        while True:
            found = self.find(job_id, names)
            if found is not None:
                return found
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(_timed_out(job_id, names, timeout))
            time.sleep(min(poll, left))


def _timed_out(job_id: str, names: tuple[str, ...] | None, timeout: float) -> str:
    which = ", ".join(names) if names else "any event"
    return f"no {which} for job {job_id} within {timeout:g} s"
