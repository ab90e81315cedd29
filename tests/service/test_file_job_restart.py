"""A ``listhygiene serve`` process killed (SIGKILL) in the middle of a form A file job, and a new
one started on the same database (SQLite and PostgreSQL): the job resumes and completes with
every row, no saved address probed again, and every address charged once.

:class:`Server` is shared by the other fault tests (``test_faults*.py``, ``test_two_processes.py``;
docs/service.md, Faults).
"""

import csv
import io
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from listhygiene.sandbox import Sandbox
from listhygiene.service.store import Store
from listhygiene.service.store.models import JobResult
from tests.service.live import a, free_port

DOMAINS = [f"slow{i}.test" for i in range(16)]
PEOPLE = ("ann", "bob")
# Slow hosts, and two SMTP sessions at a time: the job takes several seconds.
WORLD = {
    "description": "slow mail hosts for the restart test",
    "domains": {
        domain: {
            "mx": [{"preference": 10, "host": f"mx.{domain}"}],
            "mailboxes": list(PEOPLE),
        }
        for domain in DOMAINS
    },
    "hosts": {f"mx.{domain}": {"latency_ms": 150} for domain in DOMAINS},
}
ADDRESSES = [f"{person}@{domain}" for domain in DOMAINS for person in PEOPLE]


@pytest.fixture(scope="module")
def slow_world() -> Iterator[Sandbox]:
    with Sandbox(WORLD) as running:
        yield running


@pytest.fixture(params=["sqlite", "postgresql"])
def fresh_db(
    request: pytest.FixtureRequest, tmp_path: Path, new_pg_database: Callable[[], str]
) -> str:
    """An empty database of each backend, for one test's servers."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'restart.db'}"
    return new_pg_database()


class Server:
    """One ``listhygiene serve`` process on ``db``, its engine on ``sandbox``; its output (the
    access log on stdout, the rest on stderr) goes to ``log`` (a file, so that a chatty server
    never blocks on a full pipe)."""

    def __init__(
        self,
        db: str,
        sandbox: Sandbox,
        *,
        args: Sequence[str] = ("--stale-after", "1", "--concurrency", "2"),
        env: dict[str, str] | None = None,
        log: Path | None = None,
    ) -> None:
        self.port = free_port()
        environment = {
            **os.environ,
            **sandbox.engine_environment(),
            "LISTHYGIENE_HELO": "verifier.test",
            "LISTHYGIENE_SMTP_TIMEOUT": "5",
            **(env or {}),
        }
        command = [
            *(sys.executable, "-m", "listhygiene.cli", "serve"),
            *("--db", db, "--port", str(self.port), *args),
        ]
        self.log = log
        stderr: Any = open(log, "a") if log is not None else subprocess.DEVNULL  # noqa: SIM115
        try:
            self.process = subprocess.Popen(command, env=environment, stdout=stderr, stderr=stderr)
        finally:
            if log is not None:
                stderr.close()
        self.root = f"http://127.0.0.1:{self.port}"
        self.base = f"{self.root}/a/v1"
        deadline = time.monotonic() + 60  # a loaded machine starts it slowly
        while True:
            try:
                httpx.get(f"{self.base}/credits", timeout=1)
                return
            except httpx.TransportError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"server did not start: {self.stderr()}") from None
                time.sleep(0.1)

    def stderr(self) -> str:
        return self.log.read_text() if self.log is not None and self.log.exists() else ""

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


def probed(sandbox: Sandbox) -> list[str]:
    """The real addresses the hosts were asked about (not the catch-all probes)."""
    seen = []
    for domain in DOMAINS:
        seen += [r for r in sandbox.stats(f"mx.{domain}").recipients if not r.startswith("lh-")]
    return seen


def saved(db: str) -> set[str]:
    with Store(db) as store, store.transaction() as conn:
        return set(conn.execute(select(JobResult.address)).scalars())


@pytest.mark.timeout(180)
def test_killed_server_resumes_the_file_job(slow_world: Sandbox, fresh_db: str) -> None:
    db = fresh_db
    with Store(db) as store:
        key, _ = store.create_key("restart", 100)
    rows = [["id", "email"]] + [[str(i), e] for i, e in enumerate(ADDRESSES + ADDRESSES[:3])]
    content = io.StringIO()
    csv.writer(content).writerows(rows)
    first = Server(db, slow_world)
    try:
        accepted = httpx.post(
            f"{first.base}/verify/file",
            headers=a(key),
            files={"file": ("slow.csv", content.getvalue().encode())},
            timeout=30,
        )
        assert accepted.status_code == 200, accepted.text
        job_id = accepted.json()["data"]["task_id"]
        deadline = time.monotonic() + 60
        while len(saved(db)) < 4:
            assert time.monotonic() < deadline, "the first server saved nothing"
            time.sleep(0.05)
    finally:
        first.kill()
    before = saved(db)
    assert 4 <= len(before) < len(ADDRESSES), "kill the server in the middle of the job"
    for domain in DOMAINS:
        slow_world.stats(f"mx.{domain}").reset()

    second = Server(db, slow_world)
    try:
        client = httpx.Client(base_url=second.base, headers=a(key), timeout=30)
        deadline = time.monotonic() + 120
        while (status := client.get(f"/verify/file/{job_id}").json()["data"])["status"] not in (
            "completed",
            "failed",
        ):
            assert time.monotonic() < deadline, status
            time.sleep(0.1)
        result = client.get(f"/verify/file/{job_id}/results")
        credits = client.get("/credits").json()["data"]
    finally:
        second.stop()

    assert status["status"] == "completed"
    after = probed(slow_world)
    assert not set(after) & before  # nothing saved before the kill was probed again
    assert len(after) == len(set(after))  # nor anything twice after it
    assert before | set(after) == set(ADDRESSES)
    assert saved(db) == set(ADDRESSES)
    lines: list[dict[str, Any]] = list(csv.DictReader(io.StringIO(result.text)))
    assert [r["id"] for r in lines] == [r[0] for r in rows[1:]]  # every row, once, in order
    assert {r["status"] for r in lines} == {"valid"}
    assert status["total_emails"] == status["processed_emails"] == status["valid_emails"]
    assert status["valid_emails"] == len(ADDRESSES)
    assert status["credits_used"] == len(ADDRESSES)  # each address charged once
    assert credits["credits_balance"] == 100 - len(ADDRESSES)
