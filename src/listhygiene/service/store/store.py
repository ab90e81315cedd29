"""The service's store: API keys, credits and rate windows, in SQLite or PostgreSQL.

Design, for the parts of the service that build on it:

- **Keys are stored hashed** (SHA-256 of the key): a stolen database or backup grants nothing.
  The plain key is returned once, by :meth:`Store.create_key`. Keys are 256 random bits, so a
  fast hash is safe, and authentication is one indexed lookup of the hash.
- **Credits are reserved before work and settled after.** A batch or job asks for one credit per
  distinct address up front, with one conditional ``UPDATE … WHERE credits_balance >= n``; the
  database applies it atomically, so concurrent requests, threads or processes can never
  overdraw (the losers simply get "insufficient credits"). Unknown results are free, so once the
  work is done their credits are refunded. Both take an optional connection, so a reservation can
  commit in the same transaction as the job it pays for.
- **Rate limits are fixed windows counted in the database**, because several server processes
  share one key's limits; counting in memory would multiply them. Each request is one upsert that
  increments the window's row and returns the new count, atomic on both databases; a refused
  request does not count. Fixed windows also give form B its ``X-RateLimit-Reset`` for free.
- **Jobs will be claimed with ``SELECT … FOR UPDATE SKIP LOCKED``** on PostgreSQL (written next):
  each worker takes a different pending job without waiting on the others and without a broker;
  on SQLite, which has one writer at a time, ``BEGIN IMMEDIATE`` gives the same guarantee. A
  claim carries a heartbeat, so a job whose worker died is claimed again, and results already
  in ``job_results`` are neither verified nor charged twice.
"""

import hashlib
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import fields
from typing import Any, Self, TypeVar, cast

from sqlalchemy import Connection, Engine, Table, bindparam, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL

from listhygiene.db.engine import make_engine, transaction
from listhygiene.service.store.limits import Limit
from listhygiene.service.store.migrate import upgrade
from listhygiene.service.store.models import PLANS, ApiKey, RateWindow, new_id, utcnow
from listhygiene.service.store.rows import ApiKeyRow, Credits, RateHit

__all__ = ["KEY_PREFIX", "LIMIT_FIELDS", "Store", "hash_key"]

KEY_PREFIX = "lh_"
#: The rate-limit overrides a key may carry (null: the default; see limits.py).
LIMIT_FIELDS = (
    "a_single_per_minute",
    "a_bulk_per_minute",
    "a_file_per_minute",
    "a_other_per_minute",
    "b_per_hour",
    "b_per_day",
)
_T = TypeVar("_T")


def hash_key(key: str) -> str:
    """What is stored of a key: the lowercase hex SHA-256 of its UTF-8 bytes."""
    return hashlib.sha256(key.encode()).hexdigest()


_KEY_COLUMNS = [ApiKey.__table__.c[f.name] for f in fields(ApiKeyRow)]


class Store:
    """The database behind ``listhygiene serve``.

    ``Store(url)`` opens ``sqlite:///path.db`` or ``postgresql://…`` and migrates it to the
    newest schema (``migrate=False`` skips that). It is safe to share between threads, and any
    number of processes may open the same database.
    """

    def __init__(self, url: str | URL, *, migrate: bool = True, **engine_options: Any) -> None:
        self.engine: Engine = make_engine(url, **engine_options)
        if migrate:
            upgrade(self.engine)
        self._hot = _HotStatements(self.backend)

    @property
    def backend(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self.engine.dialect.name

    def transaction(self, *, write: bool = False) -> AbstractContextManager[Connection]:
        """A connection in a transaction; ``write=True`` if it writes after reading."""
        return transaction(self.engine, write=write)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- keys -----------------------------------------------------------------------------------

    def create_key(
        self,
        name: str,
        credits: int,
        plan: str = "professional",
        *,
        limits: Mapping[str, int | None] | None = None,
    ) -> tuple[str, ApiKeyRow]:
        """Create a key with ``credits``; returns the plain key (shown only now) and its row.

        ``limits`` sets custom rate limits (names from :data:`LIMIT_FIELDS`).
        """
        if plan not in PLANS:
            raise ValueError(f"unknown plan {plan!r}: one of {', '.join(PLANS)}")
        if credits < 0:
            raise ValueError("credits must not be negative")
        unknown = set(limits or {}) - set(LIMIT_FIELDS)
        if unknown:
            raise ValueError(f"unknown rate limits: {', '.join(sorted(unknown))}")
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        key_id, now = new_id(), utcnow()
        with self.transaction(write=True) as conn:
            conn.execute(
                insert(ApiKey).values(
                    id=key_id,
                    name=name,
                    key_hash=hash_key(key),
                    key_prefix=key[:8],
                    plan=plan,
                    credits_balance=credits,
                    credits_consumed=0,
                    credits_added=credits,
                    created_at=now,
                    updated_at=now,
                    **(limits or {}),
                )
            )
            row = self._key_where(conn, ApiKey.id == key_id)
        assert row is not None
        return key, row

    def authenticate(self, key: str | None) -> ApiKeyRow | None:
        """The active key whose hash matches ``key``, or None."""
        if not key or not key.startswith(KEY_PREFIX):
            return None
        with self.transaction() as conn:
            return self._key_where(conn, ApiKey.key_hash == hash_key(key), ApiKey.active)

    def set_key_active(self, key_id: str, active: bool) -> bool:
        """Enable or disable a key; False if there is no such key."""
        statement = (
            update(ApiKey).where(ApiKey.id == key_id).values(active=active, updated_at=utcnow())
        )
        return self._run(None, lambda c: c.execute(statement).rowcount == 1)

    def get_key(self, key_id: str) -> ApiKeyRow | None:
        with self.transaction() as conn:
            return self._key_where(conn, ApiKey.id == key_id)

    @staticmethod
    def _key_where(conn: Connection, *where: Any) -> ApiKeyRow | None:
        row = conn.execute(select(*_KEY_COLUMNS).where(*where)).mappings().first()
        return ApiKeyRow(**row) if row is not None else None

    # -- credits --------------------------------------------------------------------------------

    def reserve_credits(self, key_id: str, amount: int, *, conn: Connection | None = None) -> bool:
        """Take ``amount`` credits if the balance has them; False (and nothing taken) if not."""
        _check_amount(amount)
        values = {"key_id": key_id, "amount": amount}
        return self._run(conn, lambda c: c.execute(self._hot.reserve, values).rowcount == 1)

    def refund_credits(self, key_id: str, amount: int, *, conn: Connection | None = None) -> None:
        """Give back ``amount`` reserved credits that were not used (e.g. unknown results)."""
        _check_amount(amount)
        values = {"key_id": key_id, "amount": amount}
        if not self._run(conn, lambda c: c.execute(self._hot.refund, values).rowcount == 1):
            raise LookupError(f"no key {key_id!r} with {amount} credits consumed to refund")

    def reserve_many(self, requests: Sequence[tuple[str, int]]) -> list[bool]:
        """:meth:`reserve_credits` for many ``(key_id, amount)`` in one transaction, with the
        answers each would get if they were reserved one after the other in this order: a key's
        reservations are one conditional ``UPDATE`` of their sum when the balance has it all;
        otherwise the key's row is locked and its balance goes, in order, to each reservation
        that still fits. The balance never goes below zero (docs/service.md, "Speed")."""
        answers = [False] * len(requests)
        by_key = _indexes_by_key(requests)
        with self.transaction(write=True) as conn:
            for key_id in sorted(by_key):  # one order of row locks for every process
                members = by_key[key_id]
                total = sum(requests[i][1] for i in members)
                values = {"key_id": key_id, "amount": total}
                if conn.execute(self._hot.reserve, values).rowcount == 1:
                    for index in members:
                        answers[index] = True
                    continue
                balance = conn.execute(self._hot.balance, {"key_id": key_id}).scalar_one_or_none()
                if balance is None:
                    continue  # no such key
                taken = 0
                for index in members:
                    amount = requests[index][1]
                    if taken + amount <= balance:
                        taken += amount
                        answers[index] = True
                if (
                    taken
                    and conn.execute(
                        self._hot.reserve, {"key_id": key_id, "amount": taken}
                    ).rowcount
                    != 1
                ):
                    raise RuntimeError(f"the balance of {key_id!r} changed under its row lock")
        return answers

    def refund_many(self, requests: Sequence[tuple[str, int]]) -> list[bool]:
        """:meth:`refund_credits` for many ``(key_id, amount)`` in one transaction; False for a
        refund that cannot be made (more than the key has consumed, or no such key), which then
        changes nothing."""
        answers = [False] * len(requests)
        by_key = _indexes_by_key(requests)
        with self.transaction(write=True) as conn:
            for key_id in sorted(by_key):
                members = by_key[key_id]
                total = sum(requests[i][1] for i in members)
                if conn.execute(self._hot.refund, {"key_id": key_id, "amount": total}).rowcount:
                    for index in members:
                        answers[index] = True
                    continue
                for index in members:  # one of them is wrong: the others still count
                    values = {"key_id": key_id, "amount": requests[index][1]}
                    answers[index] = conn.execute(self._hot.refund, values).rowcount == 1
        return answers

    def add_credits(self, key_id: str, amount: int, *, conn: Connection | None = None) -> None:
        """Top up a key's balance."""
        _check_amount(amount)
        statement = (
            update(ApiKey)
            .where(ApiKey.id == key_id)
            .values(
                credits_balance=ApiKey.credits_balance + amount,
                credits_added=ApiKey.credits_added + amount,
            )
        )
        if not self._run(conn, lambda c: c.execute(statement).rowcount == 1):
            raise LookupError(f"no key {key_id!r}")

    def credits(self, key_id: str) -> Credits:
        """The key's balance, consumption and top-ups; LookupError for an unknown key."""
        key = self.get_key(key_id)
        if key is None:
            raise LookupError(f"no key {key_id!r}")
        return Credits(
            balance=key.credits_balance,
            consumed=key.credits_consumed,
            added=key.credits_added,
            updated_at=key.updated_at,
        )

    # -- rate limits ----------------------------------------------------------------------------

    def rate_window_hit(
        self,
        key_id: str,
        bucket: str,
        window_seconds: int,
        limit: int,
        now: float | None = None,
    ) -> RateHit:
        """Count one request in the fixed window of ``bucket`` that holds ``now``.

        Allowed while the window has counted fewer than ``limit``; a refused request is not
        counted. One statement, atomic across threads and processes.
        """
        with self.transaction(write=True) as conn:
            return self._count(conn, key_id, bucket, window_seconds, limit, now)

    def admit(
        self, key: str | None, limits: "Callable[[ApiKeyRow], Sequence[Limit]]"
    ) -> tuple[ApiKeyRow | None, list[RateHit]]:
        """Authenticate ``key`` and count the request in each of ``limits(key)`` in turn, in one
        transaction (a request's fixed cost, so kept to one round of statements).

        Returns the key (None if unknown; a disabled key has ``active`` false: for neither is
        anything counted) and the hits counted; counting stops at the first refused one, which is
        then the last of the list.
        """
        return self.admit_many([(key, limits)])[0]

    def admit_many(
        self, requests: "Sequence[tuple[str | None, Callable[[ApiKeyRow], Sequence[Limit]]]]"
    ) -> list[tuple[ApiKeyRow | None, list[RateHit]]]:
        """:meth:`admit` for many requests in one transaction, with the answers each would get if
        they were admitted one after the other in this order (so no limit admits more than its
        limit; docs/service.md, "Speed").

        The keys are read with one statement; the requests of one key and one set of limits are
        counted together, each window with one upsert of their number (two statements and a row
        lock when the window cannot take them all: then the first ones get the room that is
        left). Windows are taken in the order of key and bucket, so that two processes counting
        the same keys never wait on each other in a cycle.
        """
        answers: list[tuple[ApiKeyRow | None, list[RateHit]]] = [(None, []) for _ in requests]
        hashes = {hash_key(key) for key, _ in requests if key and key.startswith(KEY_PREFIX)}
        if not hashes:
            return answers
        with self.transaction(write=True) as conn:
            rows = {
                found["key_hash"]: ApiKeyRow(**{c.name: found[c.name] for c in _KEY_COLUMNS})
                for found in conn.execute(self._hot.keys_by_hashes, {"hashes": sorted(hashes)})
                .mappings()
                .all()
            }
            groups: dict[tuple[str, tuple[Limit, ...]], list[int]] = {}
            for index, (key, limits) in enumerate(requests):
                if not key or not key.startswith(KEY_PREFIX):
                    continue
                row = rows.get(hash_key(key))
                if row is None:
                    continue
                answers[index] = (row, [])
                if row.active:
                    groups.setdefault((row.id, tuple(limits(row))), []).append(index)
            ordered = sorted(groups.items(), key=lambda g: (g[0][0], [x.bucket for x in g[0][1]]))
            moment = int(time.time())
            for (key_id, key_limits), members in ordered:
                wanted = len(members)  # of the members, the first ``wanted`` are still in
                counted: list[tuple[Limit, int, int, int]] = []  # limit, old, counted, reset
                for limit in key_limits:
                    old, granted, reset = self._take(
                        conn,
                        key_id,
                        limit.bucket,
                        limit.window_seconds,
                        limit.limit,
                        wanted,
                        moment,
                    )
                    for position, index in enumerate(members[:wanted]):
                        hit = (
                            RateHit(True, limit.limit - old - position - 1, reset)
                            if position < granted
                            else RateHit(False, 0, reset)
                        )
                        answers[index][1].append(hit)
                    counted.append((limit, old, granted, reset))
                    wanted = granted
                    if not wanted:
                        break
                self._uncount_refused(conn, key_id, members, counted, wanted, answers)
        return answers

    def _uncount_refused(
        self,
        conn: Connection,
        key_id: str,
        members: list[int],
        counted: "list[tuple[Limit, int, int, int]]",
        admitted: int,
        answers: list[tuple[ApiKeyRow | None, list[RateHit]]],
    ) -> None:
        """A request refused by a later window (form B's day) is not counted in the earlier ones
        it passed (the hour) either: a refused request does not count (docs/service.md). Their
        rows are this transaction's (locked), so taking the count back is exact."""
        for number, (limit, old, granted, reset) in enumerate(counted):
            extra = granted - admitted
            if extra <= 0:
                continue
            window: dict[str, str | int] = {"key_id": key_id, "w_bucket": limit.bucket}
            window.update(w_start=reset - limit.window_seconds, n=extra)
            conn.execute(self._hot.window_uncount, window)
            # the refused requests see the window as the admitted ones left it
            for index in members[admitted:granted]:
                answers[index][1][number] = RateHit(True, limit.limit - old - admitted, reset)

    def _take(
        self,
        conn: Connection,
        key_id: str,
        bucket: str,
        window_seconds: int,
        limit: int,
        wanted: int,
        moment: int,
    ) -> tuple[int, int, int]:
        """Count up to ``wanted`` requests in the window of ``bucket`` that holds ``moment``:
        (the count before, how many were counted, the window's reset in epoch seconds)."""
        if window_seconds <= 0:
            raise ValueError("window_seconds must be positive")
        window_start = moment - moment % window_seconds
        reset = window_start + window_seconds
        if limit <= 0 or wanted <= 0:
            return 0, 0, reset
        where = {"key_id": key_id, "w_bucket": bucket, "w_start": window_start}
        if wanted <= limit:
            new = conn.execute(
                self._hot.count, {**where, "n": wanted, "room": limit - wanted}
            ).scalar_one_or_none()
            if new is not None:  # all of them fit
                return new - wanted, wanted, reset
        # Not all fit: lock the window and count as many as it has room for.
        conn.execute(self._hot.window_row, where)
        old = conn.execute(self._hot.window_count, where).scalar_one()
        granted = max(0, min(wanted, limit - old))
        if granted:
            conn.execute(self._hot.window_set, {**where, "w_count": old + granted})
        return old, granted, reset

    def _count(
        self,
        conn: Connection,
        key_id: str,
        bucket: str,
        window_seconds: int,
        limit: int,
        now: float | None = None,
    ) -> RateHit:
        moment = int(time.time() if now is None else now)
        old, granted, reset = self._take(conn, key_id, bucket, window_seconds, limit, 1, moment)
        if not granted:
            return RateHit(False, 0, reset)
        return RateHit(True, limit - old - 1, reset)

    # -- helpers --------------------------------------------------------------------------------

    def _run(self, conn: Connection | None, work: Callable[[Connection], _T]) -> _T:
        if conn is not None:
            return work(conn)
        with self.transaction(write=True) as own:
            return work(own)


class _HotStatements:
    """The statements of every request (key, rate window, credits), built once with bound
    parameters: building a SQLAlchemy statement costs more CPU than running it on SQLite."""

    def __init__(self, backend: str) -> None:
        keys = cast("Table", ApiKey.__table__)
        self.key_by_hash = select(*_KEY_COLUMNS).where(keys.c.key_hash == bindparam("hash"))
        self.keys_by_hashes = select(*_KEY_COLUMNS, keys.c.key_hash).where(
            keys.c.key_hash.in_(bindparam("hashes", expanding=True))
        )
        windows = cast("Table", RateWindow.__table__)
        dialect_insert = postgresql.insert if backend == "postgresql" else sqlite.insert
        window_key = (
            (windows.c.api_key_id == bindparam("key_id"))
            & (windows.c.bucket == bindparam("w_bucket"))
            & (windows.c.window_start == bindparam("w_start"))
        )
        fields: dict[str, Any] = {
            "api_key_id": bindparam("key_id"),
            "bucket": bindparam("w_bucket"),
            "window_start": bindparam("w_start"),
        }
        index = [windows.c.api_key_id, windows.c.bucket, windows.c.window_start]
        # n requests counted at once when the window has room for all of them (count <= room,
        # room = limit - n); no row when it has not.
        self.count = (
            dialect_insert(windows)
            .values(**fields, count=bindparam("n"))
            .on_conflict_do_update(
                index_elements=index,
                set_={"count": windows.c.count + bindparam("n")},
                where=windows.c.count <= bindparam("room"),
            )
            .returning(windows.c.count)
        )
        self.window_row = dialect_insert(windows).values(**fields, count=0).on_conflict_do_nothing()
        self.window_count = select(windows.c.count).where(window_key).with_for_update()
        self.window_set = update(windows).where(window_key).values(count=bindparam("w_count"))
        self.window_uncount = (
            update(windows).where(window_key).values(count=windows.c.count - bindparam("n"))
        )
        amount: Any = bindparam("amount")
        self.balance = (
            select(keys.c.credits_balance).where(keys.c.id == bindparam("key_id")).with_for_update()
        )
        self.reserve = (
            update(keys)
            .where(keys.c.id == bindparam("key_id"), keys.c.credits_balance >= amount)
            .values(
                credits_balance=keys.c.credits_balance - amount,
                credits_consumed=keys.c.credits_consumed + amount,
            )
        )
        self.refund = (
            update(keys)
            .where(keys.c.id == bindparam("key_id"), keys.c.credits_consumed >= amount)
            .values(
                credits_balance=keys.c.credits_balance + amount,
                credits_consumed=keys.c.credits_consumed - amount,
            )
        )


def _check_amount(amount: int) -> None:
    if amount < 0:
        raise ValueError("a credit amount must not be negative")


def _indexes_by_key(requests: Sequence[tuple[str, int]]) -> dict[str, list[int]]:
    """The positions of each key's ``(key_id, amount)`` requests, amounts checked first."""
    by_key: dict[str, list[int]] = {}
    for index, (key_id, amount) in enumerate(requests):
        _check_amount(amount)
        by_key.setdefault(key_id, []).append(index)
    return by_key
