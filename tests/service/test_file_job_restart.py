"""A ``listhygiene serve`` process killed (SIGKILL) in the middle of a form A file job, and a new
one started on the same database (SQLite and PostgreSQL): the job resumes and completes with
every row, no saved address probed again, and every address charged once.

The server (:class:`~tests.service.live.Server`) and the slow world are ``tests/service/live.py``'s,
shared by the other fault tests (docs/service.md, Faults).
"""

import csv
import io
import time
from typing import Any

import httpx
import pytest

from listhygiene.sandbox import Sandbox
from listhygiene.service.store import Store
from tests.service.live import (
    SLOW_ADDRESSES,
    SLOW_DOMAINS,
    SLOW_WORLD,
    Server,
    a,
    probed,
    saved,
)

SANDBOX_WORLD = SLOW_WORLD
ADDRESSES = SLOW_ADDRESSES


@pytest.mark.timeout(180)
def test_killed_server_resumes_the_file_job(sandbox: Sandbox, empty_db_url: str) -> None:
    db = empty_db_url
    with Store(db) as store:
        key, _ = store.create_key("restart", 100)
    rows = [["id", "email"]] + [[str(i), e] for i, e in enumerate(ADDRESSES + ADDRESSES[:3])]
    content = io.StringIO()
    csv.writer(content).writerows(rows)
    first = Server(db, sandbox)
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
    for domain in SLOW_DOMAINS:
        sandbox.stats(f"mx.{domain}").reset()

    second = Server(db, sandbox)
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
    after = probed(sandbox)
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
