"""Which database errors the job worker retries (store/retry.py), on errors raised by real
databases: a terminated PostgreSQL backend, SQLite's "database is locked"; and the pool's
pre-ping that keeps a terminated idle backend from reaching a caller (docs/service.md, Faults)."""

import asyncio
import socket
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import IntegrityError, OperationalError

from listhygiene.service.store import Store
from listhygiene.service.store.retry import backoff, is_transient, retry_async
from tests.conftest import _admin_connection


def _terminate(url: str) -> int:
    name = url.rsplit("/", 1)[1]
    with _admin_connection() as admin:
        row = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = %s",
            (name,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def _key_count(store: Store) -> int:
    with store.transaction() as conn:
        return int(conn.execute(text("SELECT count(*) FROM api_keys")).scalar_one())


@pytest.mark.timeout(60)
def test_a_terminated_idle_backend_is_replaced_by_the_pool(
    new_pg_database: Callable[[], str],
) -> None:
    url = new_pg_database()
    with Store(url) as store:
        assert _key_count(store) == 0  # a connection now idle in the pool
        assert _terminate(url) >= 1
        assert _key_count(store) == 0  # pre-ping found it dead and connected again


@pytest.mark.timeout(60)
def test_without_pre_ping_a_terminated_backend_is_a_transient_error(
    new_pg_database: Callable[[], str],
) -> None:
    url = new_pg_database()
    with Store(url, pool_pre_ping=False) as store:
        _key_count(store)
        _terminate(url)
        with pytest.raises(OperationalError) as raised:
            _key_count(store)  # without pre-ping the caller meets the dead connection
    assert is_transient(raised.value)
    assert raised.value.connection_invalidated


@pytest.mark.timeout(60)
def test_a_silent_postgresql_host_is_a_transient_error_not_a_hang() -> None:
    """A host that accepts the connection and never answers (a partition, a hung server): the
    connection attempt gives up after its time-out instead of holding the worker forever."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        with pytest.raises(OperationalError) as raised:
            Store(f"postgresql://nobody@127.0.0.1:{port}/db")
    assert is_transient(raised.value)


@pytest.mark.timeout(60)
def test_postgresql_connections_keep_alive(new_pg_database: Callable[[], str]) -> None:
    """TCP keepalives on every connection: a peer that vanished is noticed by the operating
    system within about a minute, and the statement waiting on it fails (and is retried)."""
    with Store(new_pg_database()) as store, store.engine.connect() as conn:
        parameters = conn.connection.dbapi_connection.info.get_parameters()  # type: ignore[union-attr]
    assert parameters["keepalives"] == "1"
    assert int(parameters["keepalives_idle"]) <= 60
    # a URL's own settings win
    url = new_pg_database() + "?keepalives_idle=45&connect_timeout=7"
    with Store(url) as store, store.engine.connect() as conn:
        parameters = conn.connection.dbapi_connection.info.get_parameters()  # type: ignore[union-attr]
    assert (parameters["keepalives_idle"], parameters["connect_timeout"]) == ("45", "7")


def test_database_is_locked_is_transient(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x INTEGER PRIMARY KEY)")
    holder.execute("BEGIN IMMEDIATE")
    engine = create_engine(f"sqlite:///{path}", connect_args={"timeout": 0})
    try:
        with pytest.raises(OperationalError) as raised, engine.connect() as conn:
            conn.exec_driver_sql("INSERT INTO t VALUES (1)")
    finally:
        engine.dispose()
        holder.rollback()
        holder.close()
    assert "locked" in str(raised.value)
    assert is_transient(raised.value)
    assert is_transient(raised.value.orig)


def test_an_error_of_the_work_is_not_transient(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'x.db'}")
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE t (x INTEGER PRIMARY KEY)")
            conn.exec_driver_sql("INSERT INTO t VALUES (1)")
        with pytest.raises(IntegrityError) as raised, engine.begin() as conn:
            conn.exec_driver_sql("INSERT INTO t VALUES (1)")
    finally:
        engine.dispose()
    assert not is_transient(raised.value)
    assert not is_transient(ValueError("bad input"))


def test_backoff_is_bounded() -> None:
    waits = list(backoff(10, first=0.5, longest=2))
    assert waits == [0.5, 1, 2, 2, 2, 2, 0.5]
    assert sum(waits) == 10
    assert list(backoff(0)) == []


def _locked() -> OperationalError:
    return OperationalError("BEGIN IMMEDIATE", {}, sqlite3.OperationalError("database is locked"))


def test_retry_async_tries_transient_errors_again_within_its_budget() -> None:
    calls: list[int] = []

    def flaky(fail: int) -> str:
        calls.append(1)
        if len(calls) <= fail:
            raise _locked()
        return "saved"

    assert asyncio.run(retry_async(1.0, flaky, 2)) == "saved"
    assert len(calls) == 3
    calls.clear()
    with pytest.raises(OperationalError):  # never succeeds: the last error, once the budget is out
        asyncio.run(retry_async(0.3, flaky, 1000))
    assert 2 <= len(calls) < 1000
    calls.clear()

    def broken() -> None:
        calls.append(1)
        raise ValueError("bad input")

    with pytest.raises(ValueError, match="bad input"):  # a fault of the work: raised at once
        asyncio.run(retry_async(5.0, broken))
    assert len(calls) == 1
