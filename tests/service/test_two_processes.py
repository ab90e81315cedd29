"""Two ``listhygiene serve`` processes on one PostgreSQL database, as a deployment runs them.

They must share the jobs (each job verified by one worker, no address probed twice) and one key's
rate limit (counted in the database, not per process), and when one is killed in the middle of a
job the other finishes it (docs/service.md, Faults).
"""

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
from tests.service.live import SLOW_ADDRESSES as ADDRESSES
from tests.service.live import SLOW_DOMAINS as DOMAINS
from tests.service.live import SLOW_WORLD, Server, b, parent_of, probed, saved


@pytest.fixture
def deployment(
    sandbox: Sandbox, new_pg_database: Callable[[], str], tmp_path: Path
) -> Iterator[tuple[str, list[str]]]:
    """(database URL, the two servers' roots)."""
    url = new_pg_database()
    Store(url).close()  # migrate once before both start (they would cope, but this is quicker)
    env = {"LISTHYGIENE_RETRY_DELAYS": "2", "LISTHYGIENE_SMTP_TIMEOUT": "2"}
    servers: list[Server] = []
    try:
        for i in range(2):
            servers.append(Server(url, sandbox, args=(), env=env, log=tmp_path / f"s{i}.log"))
        yield url, [server.root for server in servers]
    finally:
        for server in servers:
            server.stop()


def test_two_servers_share_jobs_without_double_work(
    deployment: tuple[str, list[str]], sandbox: Sandbox
) -> None:
    url, bases = deployment
    with Store(url) as store:
        key, _ = store.create_key("shared", 1000)
    people = [
        f"{p}@northwind.test"
        for p in (
            "james.wilson",
            "mary.johnson",
            "robert.brown",
            "patricia.garcia",
            "john.miller",
            "jennifer.davis",
            "michael.rodriguez",
            "linda.martinez",
            "david.hernandez",
            "elizabeth.lopez",
            "william.gonzalez",
            "barbara.anderson",
        )
    ]
    stats = sandbox.stats("mx.northwind.test")
    stats.reset()
    headers = {"Authorization": f"Bearer {key}"}
    jobs = []
    for i in range(6):  # six jobs of two addresses, submitted to both servers in turn
        response = httpx.post(
            f"{bases[i % 2]}/b/v1/verify/bulk",
            headers=headers,
            json={"emails": people[2 * i : 2 * i + 2]},
            timeout=10,
        )
        assert response.status_code == 200, response.text
        jobs.append(response.json()["job_id"])
    deadline = time.monotonic() + 60
    pending = set(jobs)
    while pending and time.monotonic() < deadline:
        for job_id in list(pending):
            status = httpx.get(
                f"{bases[0]}/b/v1/verify/bulk/{job_id}", headers=headers, timeout=10
            ).json()
            if status["status"] == "completed":
                assert status["valid"] == 2
                pending.discard(job_id)
        time.sleep(0.2)
    assert not pending, "jobs did not complete"
    probed = [r for r in stats.recipients if not r.startswith("lh-")]
    assert sorted(probed) == sorted(people)  # every address probed exactly once, none twice
    with Store(url) as store, store.transaction() as conn:
        workers = set(conn.execute(select(Job.claimed_by).where(Job.id.in_(jobs))).scalars())
    assert None not in workers
    assert len(workers) >= 1


def test_one_rate_limit_across_both_servers(deployment: tuple[str, list[str]]) -> None:
    url, bases = deployment
    with Store(url) as store:
        key, _ = store.create_key("limited", 10, limits={"b_per_hour": 8})
    headers = {"Authorization": f"Bearer {key}"}
    codes: list[Any] = []
    for i in range(12):
        response = httpx.get(f"{bases[i % 2]}/b/v1/credits", headers=headers, timeout=10)
        codes.append(response.status_code)
    assert codes.count(200) == 8
    assert codes.count(429) == 4
    assert codes[:8] == [200] * 8  # the ninth request, on either server, is refused


def test_serve_with_worker_processes(sandbox: Sandbox, tmp_path: Any) -> None:
    """``serve --workers 2``: uvicorn's two server processes build the app from the configuration
    ``serve`` hands them, on one SQLite file, and run jobs and requests as one service."""
    db = f"sqlite:///{tmp_path / 'workers.db'}"
    with Store(db) as store:
        key, _ = store.create_key("workers", 100)
    headers = {"LISTHYGIENE-API-KEY": key}
    server = Server(db, sandbox, args=("--workers", "2"), log=tmp_path / "server.log")
    base = server.root
    try:
        deadline = time.monotonic() + 60
        upload = httpx.post(
            f"{base}/a/v1/verify/file",
            headers=headers,
            files={
                "file": ("two.txt", b"alice.johnson@acme-corp.test\nnobody.here@acme-corp.test\n")
            },
            timeout=30,
        )
        assert upload.status_code == 200, upload.text
        job_id = upload.json()["data"]["task_id"]
        while (job := httpx.get(f"{base}/a/v1/verify/file/{job_id}", headers=headers).json())[
            "data"
        ]["status"] != "completed":
            assert time.monotonic() < deadline, job
            time.sleep(0.2)
        assert (job["data"]["valid_emails"], job["data"]["invalid_emails"]) == (1, 1)
        answers = [
            httpx.post(
                f"{base}/a/v1/verify/single",
                headers=headers,
                json={"email": "alice.johnson@acme-corp.test", "check_smtp": False},
            ).json()["data"]["status"]
            for _ in range(10)
        ]
        assert answers == ["valid"] * 10
        credits = httpx.get(f"{base}/a/v1/credits", headers=headers).json()["data"]
        assert credits["credits_consumed"] == 12
    finally:
        server.stop()


@pytest.mark.timeout(180)
def test_the_other_server_finishes_the_job_of_a_killed_one(
    new_pg_database: Callable[[], str], make_mail_sandbox: Callable[..., Sandbox], tmp_path: Any
) -> None:
    url = new_pg_database()
    with Store(url) as store:
        key, key_row = store.create_key("two", 100)
    world = make_mail_sandbox(SLOW_WORLD)  # its own: the probes of this test alone
    servers = [Server(url, world, log=tmp_path / f"server{i}.log") for i in range(2)]
    try:
        response = httpx.post(
            f"{servers[0].root}/b/v1/verify/bulk",
            headers=b(key),
            json={"emails": ADDRESSES},
            timeout=30,
        )
        assert response.status_code == 200, response.text
        job_id = response.json()["job_id"]
        deadline = time.monotonic() + 60
        while len(saved(url)) < 4:
            assert time.monotonic() < deadline, "no server saved anything"
            time.sleep(0.05)
        # Kill the server whose job runner holds the job (claims are "<pid>-<id>/<slot>",
        # the runner's pid; its parent is the server).
        with Store(url, migrate=False) as store, store.transaction() as conn:
            holder = conn.execute(select(Job.claimed_by).where(Job.id == job_id)).scalar_one()
        pids = [server.process.pid for server in servers]
        victim = pids.index(parent_of(int(holder.split("-", 1)[0])))
        servers[victim].process.send_signal(signal.SIGKILL)
        servers[victim].process.wait(10)
        before = saved(url)
        assert 4 <= len(before) < len(ADDRESSES), "kill the server in the middle of the job"
        for domain in DOMAINS:
            world.stats(f"mx.{domain}").reset()
        survivor = servers[1 - victim]
        deadline = time.monotonic() + 120
        while (
            status := httpx.get(
                f"{survivor.root}/b/v1/verify/bulk/{job_id}", headers=b(key), timeout=30
            ).json()
        )["status"] not in ("completed", "failed"):
            assert time.monotonic() < deadline, status
            time.sleep(0.1)
        after = probed(world)
        with Store(url, migrate=False) as store, store.transaction() as conn:
            finisher = conn.execute(select(Job.claimed_by).where(Job.id == job_id)).scalar_one()
        # the survivor's runner (read while it runs)
        finished_by = parent_of(int(finisher.split("-", 1)[0]))
    finally:
        for server in servers:
            server.stop()
    assert status["status"] == "completed"
    assert status["processed"] == status["valid"] == len(ADDRESSES)
    assert not set(after) & before  # nothing saved before the kill was probed again
    assert len(after) == len(set(after))  # nor anything twice after it
    assert saved(url) == set(ADDRESSES)
    with Store(url, migrate=False) as store:
        with store.transaction() as conn:
            used = conn.execute(select(Job.credits_used).where(Job.id == job_id)).scalar_one()
        balance = store.credits(key_row.id).balance
    assert finished_by == survivor.process.pid
    assert used == len(ADDRESSES)  # each address charged once
    assert balance == 100 - len(ADDRESSES)
