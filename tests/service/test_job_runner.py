"""Jobs run outside the processes that answer requests (issue 15, item 6; docs/service.md,
"Fairness"): ``listhygiene serve`` starts a job runner process that claims the jobs from the
store and delivers the webhooks; the server process only admits and reads.

Each test runs a real ``listhygiene serve`` and tells the processes apart by their ids: a job's
claim carries the pid of the process that ran it.
"""

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from listhygiene.sandbox import Sandbox
from listhygiene.service.store import Store
from listhygiene.service.store.models import Job
from tests.service.live import Server, a, b, parent_of

PEOPLE = ["alice.johnson@acme-corp.test", "bob.smith@acme-corp.test"]


@pytest.fixture
def served(sandbox: Sandbox, tmp_path: Path) -> Iterator[tuple[Server, str, str]]:
    """(a running ``serve`` on SQLite, its database URL, a key)."""
    db = f"sqlite:///{tmp_path / 'runner.db'}"
    with Store(db) as store:
        key, _ = store.create_key("runner", 1_000)
    server = Server(db, sandbox, args=("--stale-after", "2"), log=tmp_path / "server.log")
    try:
        yield server, db, key
    finally:
        server.stop()


def _until(condition: Callable[[], Any], seconds: float = 60) -> Any:
    deadline = time.monotonic() + seconds
    while not (value := condition()):
        assert time.monotonic() < deadline, "gave up waiting"
        time.sleep(0.05)
    return value


def _submit(server: Server, key: str) -> str:
    response = httpx.post(
        f"{server.root}/b/v1/verify/bulk",
        headers=b(key),
        json={"emails": PEOPLE, "smtp_check": False},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    job_id: str = response.json()["job_id"]
    return job_id


def _status(server: Server, key: str, job_id: str) -> dict[str, Any]:
    answer: dict[str, Any] = httpx.get(
        f"{server.root}/b/v1/verify/bulk/{job_id}", headers=b(key), timeout=30
    ).json()
    return answer


def _runner_of(db: str, job_id: str) -> int:
    """The pid of the process whose claim the job carries ("<pid>-<id>/<slot>")."""
    with Store(db, migrate=False) as store, store.transaction() as conn:
        holder = conn.execute(select(Job.claimed_by).where(Job.id == job_id)).scalar_one()
    assert holder is not None
    return int(holder.split("-", 1)[0])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped) is gone too
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.timeout(120)
def test_jobs_run_in_the_runner_not_in_the_request_process(
    served: tuple[Server, str, str],
) -> None:
    server, db, key = served
    job_id = _submit(server, key)
    assert _until(lambda: _status(server, key, job_id)["status"] == "completed")
    runner = _runner_of(db, job_id)
    # run by a child of serve, not by serve (which answers the requests)
    assert runner != server.process.pid
    assert parent_of(runner) == server.process.pid

    # With the runner frozen, requests are still answered and a new job waits in the store.
    os.kill(runner, signal.SIGSTOP)
    try:
        waiting = _submit(server, key)
        for person in PEOPLE:
            answer = httpx.post(
                f"{server.base}/verify/single",
                headers=a(key),
                json={"email": person, "check_smtp": False},
                timeout=30,
            )
            assert answer.status_code == 200, answer.text
            assert answer.json()["data"]["status"] == "valid"
        assert _status(server, key, waiting)["processed"] == 0
    finally:
        os.kill(runner, signal.SIGCONT)
    assert _until(lambda: _status(server, key, waiting)["status"] == "completed")
    assert _runner_of(db, waiting) == runner


@pytest.mark.timeout(120)
def test_a_runner_that_dies_is_started_again_and_stops_with_its_server(
    served: tuple[Server, str, str],
) -> None:
    server, db, key = served
    first = _submit(server, key)
    assert _until(lambda: _status(server, key, first)["status"] == "completed")
    runner = _runner_of(db, first)
    os.kill(runner, signal.SIGKILL)
    second = _submit(server, key)
    assert _until(lambda: _status(server, key, second)["status"] == "completed")
    again = _runner_of(db, second)
    assert again != runner
    assert parent_of(again) == server.process.pid
    server.stop()  # SIGTERM: the runner is stopped with it
    assert _until(lambda: not _alive(again), 30)


@pytest.mark.timeout(120)
def test_a_killed_server_leaves_no_runner_behind(served: tuple[Server, str, str]) -> None:
    """Its jobs must go stale for another server to resume them (docs/service.md, Faults): a
    runner outliving its server would hold them for ever."""
    server, db, key = served
    job_id = _submit(server, key)
    assert _until(lambda: _status(server, key, job_id)["status"] == "completed")
    runner = _runner_of(db, job_id)
    server.kill()
    assert _until(lambda: not _alive(runner), 30)
