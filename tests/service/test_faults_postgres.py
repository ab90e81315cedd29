"""PostgreSQL backends terminated under a running ``listhygiene serve`` (an operator's
``pg_terminate_backend``, a failover, a proxy dropping connections): the job in progress still
completes with every address, each charged once, on the same server process (docs/service.md,
Faults)."""

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from sqlalchemy import select

from listhygiene.sandbox import Sandbox
from listhygiene.service.store import Store
from listhygiene.service.store.models import Job, JobResult
from tests.conftest import _admin_connection
from tests.service.live import SLOW_ADDRESSES as ADDRESSES
from tests.service.live import SLOW_WORLD, Server, b

CREDITS = 100
SANDBOX_WORLD = SLOW_WORLD
#: The first statement of a save's write transaction (store/jobs.py, save_prepared), as
#: pg_stat_activity shows it: a heartbeat is the same UPDATE without RETURNING.
SAVE = "UPDATE jobs SET heartbeat_at=% RETURNING jobs.form%"
TERMINATE = (
    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
    " WHERE datname = %s AND pid <> pg_backend_pid() AND pid <> ALL(%s)"
)


@pytest.fixture
def admin() -> Iterator[psycopg.Connection[Any]]:
    """A connection to the server's maintenance database (not the store's): it watches and
    terminates the store's backends without being one of them."""
    try:
        connection = _admin_connection()
    except psycopg.OperationalError as exc:
        pytest.skip(f"no PostgreSQL: {exc}")
    with connection:
        yield connection


def _database(url: str) -> str:
    return url.rsplit("/", 1)[1]


def _saved(db: str) -> set[str]:
    with Store(db, migrate=False) as store, store.transaction() as conn:
        return set(conn.execute(select(JobResult.address)).scalars())


def _wait(condition: Callable[[], Any], what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, what
        time.sleep(0.05)
    return value


def _start_job(server: Server, key: str) -> str:
    response = httpx.post(
        f"{server.root}/b/v1/verify/bulk", headers=b(key), json={"emails": ADDRESSES}, timeout=30
    )
    assert response.status_code == 200, response.text
    return str(response.json()["job_id"])


def _finish(server: Server, key: str, job_id: str) -> dict[str, Any]:
    """The job's status once it is closed (the server is the same process throughout)."""

    def closed() -> dict[str, Any] | None:
        status = httpx.get(
            f"{server.root}/b/v1/verify/bulk/{job_id}", headers=b(key), timeout=30
        ).json()
        return status if status.get("status") in ("completed", "failed") else None

    status = _wait(closed, "the job did not close", timeout=120)
    assert server.process.poll() is None, "the server must survive on its own"
    return dict(status)


def _check_complete(db: str, key_id: str, job_id: str, status: dict[str, Any]) -> None:
    """Every address has one result, the counts reach the total, each address is charged once."""
    assert status["status"] == "completed", (status, "the job must not fail for the database")
    assert status["processed"] == status["total"] == status["valid"] == len(ADDRESSES)
    assert _saved(db) == set(ADDRESSES)
    with Store(db, migrate=False) as store:
        with store.transaction() as conn:
            used = conn.execute(select(Job.credits_used).where(Job.id == job_id)).scalar_one()
        balance = store.credits(key_id).balance
    assert used == len(ADDRESSES)
    assert balance == CREDITS - len(ADDRESSES)


@pytest.fixture(params=[10.0])
def running(
    request: pytest.FixtureRequest,
    sandbox: Sandbox,
    new_pg_database: Callable[[], str],
    tmp_path: Path,
) -> Iterator[tuple[str, Server, str, str]]:
    """(database URL, a server on it, a key and its id); the server is stopped at the end.

    ``--stale-after`` is the parameter (10 s unless a test says otherwise): long enough that a
    slot's store calls are retried within its own claim, not taken over by its sibling slot.
    """
    db = new_pg_database()
    with Store(db) as store:
        key, row = store.create_key("faults", CREDITS)
    args = ("--stale-after", str(request.param), "--concurrency", "2")
    server = Server(db, sandbox, args=args, log=tmp_path / "server.log")
    try:
        yield db, server, key, row.id
    finally:
        server.stop()


@pytest.mark.timeout(180)
def test_backends_terminated_in_the_middle_of_a_write(
    running: tuple[str, Server, str, str], admin: psycopg.Connection[Any]
) -> None:
    db, server, key, key_id = running
    job_id = _start_job(server, key)
    _wait(lambda: _saved(db), "the worker saved nothing")
    # Hold the job's row: the worker's next save (or heartbeat) blocks on it, in the middle of
    # its write transaction, and is terminated there.
    with psycopg.connect(db) as holder:
        holder.execute("SELECT id FROM jobs WHERE id = %s FOR UPDATE", (job_id,))
        holder_pid = holder.info.backend_pid
        _wait(
            lambda: admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s"
                " AND wait_event_type = 'Lock' AND query LIKE %s",
                (_database(db), SAVE),
            ).fetchone()[0],  # type: ignore[index]
            "no save of results waited on the job's row",
        )
        terminated = admin.execute(TERMINATE, (_database(db), [holder_pid])).fetchone()[0]  # type: ignore[index]
        assert terminated >= 1
        holder.rollback()
    _check_complete(db, key_id, job_id, _finish(server, key, job_id))


@pytest.mark.timeout(180)
def test_backends_terminated_while_idle(
    running: tuple[str, Server, str, str], admin: psycopg.Connection[Any]
) -> None:
    db, server, key, key_id = running
    job_id = _start_job(server, key)
    terminated = 0
    for _ in range(3):  # three times while the job runs, each after the worker saved more
        before = len(_saved(db))
        _wait(lambda: len(_saved(db)) > before, "the worker saved nothing more")  # noqa: B023
        if before + 1 >= len(ADDRESSES):
            break
        # Wait for every backend of the store to be idle in the pool (not in a transaction).
        _wait(
            lambda: (
                not admin.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND state <> 'idle'",
                    (_database(db),),
                ).fetchone()[0]
            ),  # type: ignore[index]
            "the store's backends were never idle",
        )
        terminated += admin.execute(TERMINATE, (_database(db), [])).fetchone()[0]  # type: ignore[index]
    assert terminated >= 1
    _check_complete(db, key_id, job_id, _finish(server, key, job_id))


@pytest.mark.timeout(180)
@pytest.mark.parametrize("running", [2.0], indirect=True)
def test_database_away_longer_than_the_retries_hands_the_job_back(
    running: tuple[str, Server, str, str], admin: psycopg.Connection[Any]
) -> None:
    """The store refuses every connection for longer than the worker's retries (``--stale-after``
    seconds): the job is handed back, not failed, and completes once the database returns."""
    db, server, key, key_id = running
    job_id = _start_job(server, key)
    _wait(lambda: _saved(db), "the worker saved nothing")
    name = _database(db)
    admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
    try:
        admin.execute(TERMINATE, (name, []))
        _wait(
            lambda: f"job {job_id} handed back" in server.stderr(),
            "the worker did not hand the job back",
        )
    finally:
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
    _check_complete(db, key_id, job_id, _finish(server, key, job_id))
