"""A server SIGKILLed in the middle of a file job over greylisting mail hosts, and restarted: every
row gets one result, and the verdicts are those of a run that was never interrupted.

The restarted server probes again the addresses whose results were not saved; their hosts have
seen them before, so they pass greylisting at once, but the catch-all probe of the domain is a
fresh random address, greylisted in turn: it must be tried again like any other, or the domain's
mailboxes come back ``unknown`` instead of ``valid`` (docs/service.md, Faults).
"""

import csv
import io
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from listhygiene.sandbox import Sandbox
from tests.service.live import Server, a, saved

DOMAINS = [f"grey{i}.test" for i in range(12)]
PEOPLE = ("ann", "bob")
# Greylisting hosts (a short delay) behind slow round trips, two SMTP sessions at a time: the
# job takes several seconds and is killed while some domains wait for their retry.
WORLD = {
    "description": "greylisting mail hosts for the restart test",
    "domains": {
        domain: {"mx": [{"preference": 10, "host": f"mx.{domain}"}], "mailboxes": list(PEOPLE)}
        for domain in DOMAINS
    },
    "hosts": {f"mx.{domain}": {"latency_ms": 120, "greylist_delay_ms": 300} for domain in DOMAINS},
}
ADDRESSES = [f"{who}@{domain}" for domain in DOMAINS for who in (*PEOPLE, "nobody")]
ROWS = [["id", "email"]] + [[str(i), e] for i, e in enumerate(ADDRESSES + ADDRESSES[:4])]
ENV = {"LISTHYGIENE_RETRY_DELAYS": "1,1"}
#: The module's one test runs in a world of its own (``sandbox`` of tests/conftest.py), and
#: the uninterrupted run in another (greylisting remembers whom it has seen).
SANDBOX_WORLD = WORLD


def _upload() -> bytes:
    content = io.StringIO()
    csv.writer(content).writerows(ROWS)
    return content.getvalue().encode()


def _submit(server: Server, key: str) -> str:
    accepted = httpx.post(
        f"{server.base}/verify/file",
        headers=a(key),
        files={"file": ("grey.csv", _upload())},
        timeout=30,
    )
    assert accepted.status_code == 200, accepted.text
    return str(accepted.json()["data"]["task_id"])


def _verdicts(server: Server, key: str, job_id: str) -> list[tuple[str, str, str]]:
    """``(id, email, status)`` of every row of the completed job's result file."""
    client = httpx.Client(base_url=server.base, headers=a(key), timeout=30)
    deadline = time.monotonic() + 120
    while (status := client.get(f"/verify/file/{job_id}").json()["data"])["status"] not in (
        "completed",
        "failed",
    ):
        assert time.monotonic() < deadline, status
        time.sleep(0.1)
    assert status["status"] == "completed", status
    result = client.get(f"/verify/file/{job_id}/results")
    return [(r["id"], r["email"], r["status"]) for r in csv.DictReader(io.StringIO(result.text))]


def _uninterrupted(fresh: Sandbox, tmp_path: Path) -> list[tuple[str, str, str]]:
    from listhygiene.service.store import Store

    db = f"sqlite:///{tmp_path / 'whole.db'}"
    with Store(db) as store:
        key, _ = store.create_key("whole", 1000)
    with Server(db, fresh, env=ENV, log=tmp_path / "whole.log") as server:
        return _verdicts(server, key, _submit(server, key))


def _interrupted_domain(world: Sandbox, db: str) -> bool:
    """Some domain's mailboxes were asked about but not all their results are saved."""
    done = saved(db)
    if not done:
        return False
    for domain in DOMAINS:
        asked = {r for r in world.stats(f"mx.{domain}").recipients if not r.startswith("lh-")}
        if asked and not {f"{who}@{domain}" for who in PEOPLE} <= done:
            return True
    return False


@pytest.mark.timeout(240)
def test_greylisted_verdicts_survive_a_kill_and_restart(
    sandbox: Sandbox, make_mail_sandbox: Callable[..., Sandbox], tmp_path: Path
) -> None:
    world = sandbox
    from listhygiene.service.store import Store

    db = f"sqlite:///{tmp_path / 'grey.db'}"
    with Store(db) as store:
        key, _ = store.create_key("grey", 1000)
    first = Server(db, world, env=ENV, log=tmp_path / "first.log")
    try:
        job_id = _submit(first, key)
        deadline = time.monotonic() + 60
        while not _interrupted_domain(world, db):
            assert time.monotonic() < deadline, "no domain was in progress"
            time.sleep(0.02)
    finally:
        first.kill()
    assert len(saved(db)) < len(ADDRESSES), "kill the server in the middle of the job"

    with Server(db, world, env=ENV, log=tmp_path / "second.log") as second:
        resumed = _verdicts(second, key, job_id)

    assert [(i, e) for i, e, _ in resumed] == [(r[0], r[1]) for r in ROWS[1:]]  # one per row
    assert saved(db) == set(ADDRESSES)  # every address has its one result
    expected = _uninterrupted(make_mail_sandbox(WORLD), tmp_path)
    assert {e: s for _, e, s in expected} == {
        e: "invalid" if e.startswith("nobody@") else "valid" for e in ADDRESSES
    }
    assert resumed == expected
