"""Which database errors are worth trying again, and trying them again.

A connection lost (a restarted or failed-over PostgreSQL, ``pg_terminate_backend``, a proxy that
drops idle connections), a serialization failure or deadlock, SQLite's "database is locked", a
pool with no free connection: none of these says anything about the job or request that met it,
and the same statement a moment later usually succeeds. The job worker retries them with
back-off and, when the database stays away, hands its job back instead of failing it
(docs/service.md, Faults). Every store call the worker retries is idempotent: results are
inserted with ``ON CONFLICT DO NOTHING`` and counted by the rows inserted, and closing a job is a
conditional update that matches once.
"""

import asyncio
import functools
import logging
import sqlite3
from collections.abc import Awaitable, Callable, Iterator
from typing import ParamSpec, TypeVar

from sqlalchemy import exc as sa_exc

from listhygiene.errors import first_line

__all__ = ["backoff", "is_transient", "retry_async", "retry_attempts"]

log = logging.getLogger(__name__)

_P = ParamSpec("_P")
_T = TypeVar("_T")

#: SQLSTATE classes and codes of PostgreSQL that a retry can cure: connection exceptions (08),
#: transaction rollbacks (40: serialization failure, deadlock), operator intervention (57P01
#: admin shutdown, 57P02 crash shutdown, 57P03 cannot connect now), too many connections (53300).
_TRANSIENT_CLASSES = ("08", "40")
_TRANSIENT_CODES = frozenset({"57P01", "57P02", "57P03", "53300"})


def is_transient(error: BaseException) -> bool:
    """True if ``error`` is the database being unavailable for a while, not a fault of the work."""
    if isinstance(error, sa_exc.DBAPIError):
        if error.connection_invalidated:
            return True
        # psycopg and sqlite3 raise OperationalError for what the operator's side causes: a lost
        # connection, a refused one, a lock not granted, a serialization failure.
        if isinstance(error, (sa_exc.OperationalError, sa_exc.InterfaceError)):
            return True
        error = error.orig if error.orig is not None else error
    if isinstance(error, (sa_exc.DisconnectionError, sa_exc.TimeoutError)):
        return True  # a dead pooled connection; no connection free in the pool
    sqlstate = getattr(error, "sqlstate", None)
    if isinstance(sqlstate, str) and (
        sqlstate[:2] in _TRANSIENT_CLASSES or sqlstate in _TRANSIENT_CODES
    ):
        return True
    return isinstance(error, sqlite3.OperationalError) and "locked" in str(error)


def backoff(budget: float, *, first: float = 0.1, longest: float = 5.0) -> Iterator[float]:
    """Waits that double from ``first`` up to ``longest`` each, and add up to ``budget``."""
    spent, wait = 0.0, first
    while spent < budget:
        step = min(wait, longest, budget - spent)
        yield step
        spent += step
        wait *= 2


async def retry_async(
    budget: float, call: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs
) -> _T:
    """``call(*args, **kwargs)`` in a thread, tried again after transient database errors for
    up to ``budget`` seconds of waiting; the last error is raised when the budget is spent (and
    any other error at once)."""
    return await retry_attempts(
        budget, functools.partial(asyncio.to_thread, call, *args, **kwargs), _name(call)
    )


async def retry_attempts(budget: float, attempt: Callable[[], Awaitable[_T]], name: str) -> _T:
    """:func:`retry_async` for a store call made another way than in a thread: ``attempt()``
    makes it once (the job worker's writes on SQLite, ``service/worker.py``); ``name`` is what
    the log calls it."""
    waits = backoff(budget)
    while True:
        try:
            return await attempt()
        except Exception as error:
            if not is_transient(error):
                raise
            wait = next(waits, None)
            if wait is None:
                raise
            log.warning(
                "database unavailable in %s, trying again in %.1f s: %s",
                name,
                wait,
                first_line(error),
            )
            await asyncio.sleep(wait)


def _name(call: object) -> str:
    return str(getattr(call, "__name__", call))
