"""One key's big job does not slow another key's single verifications (issue 15, item 6).

The job's domains answer DNS slowly, so its lookups queue for the engine's shared DNS slots.
Before the fix (one first-come-first-served semaphore, the whole job admitted at once) another
key's single verification waited behind every lookup the job had queued; now interactive work
gets the next free slot. The assertions count, never time: how many DNS lookups the engine had
made when the other key's answers were all in, out of the job's total (docs/service.md,
"Fairness").
"""

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from listhygiene.engine import Engine
from listhygiene.sandbox import Sandbox
from listhygiene.service.app import create_app
from listhygiene.service.store import Store
from tests.service.live import LiveServer, a, b, engine_for

#: The job's domains, each answering DNS this late; each costs two lookups (MX, then A).
JOB_DOMAINS = 300
JOB_DNS_LATENCY_MS = 100
#: Another key's single verifications, on domains that answer at once.
OTHER_DOMAINS = 5


def _world() -> dict[str, Any]:
    domains: dict[str, Any] = {
        f"job{i}.test": {"a": ["192.0.2.1"], "dns_latency_ms": JOB_DNS_LATENCY_MS}
        for i in range(JOB_DOMAINS)
    }
    domains.update({f"quick{i}.test": {"a": ["192.0.2.2"]} for i in range(OTHER_DOMAINS)})
    return {"domains": domains}


SANDBOX_WORLD = _world()
STORE_BACKENDS = ("sqlite",)


@pytest.fixture
def served(sandbox: Sandbox, store: Store) -> Iterator[tuple[str, Store, Engine]]:
    engine = engine_for(sandbox, dns_timeout=5)
    app = create_app(store, engine, worker_options={"poll_seconds": 0.05})
    with LiveServer(app) as url:
        yield url, store, engine


def _wait_until(condition: Callable[[], bool], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "gave up waiting"
        time.sleep(0.01)


def test_another_keys_singles_go_before_a_big_jobs_lookups(
    served: tuple[str, Store, Engine],
) -> None:
    url, store, engine = served
    job_key, _ = store.create_key("big job", 10_000)
    other_key, _ = store.create_key("interactive", 100)
    emails = [f"user{n}@job{i}.test" for i in range(JOB_DOMAINS) for n in range(2)]
    job_lookups = 2 * JOB_DOMAINS

    with httpx.Client(base_url=url, timeout=60) as client:
        submitted = client.post(
            "/b/v1/verify/bulk", headers=b(job_key), json={"emails": emails, "smtp_check": False}
        )
        assert submitted.status_code == 200, submitted.text
        job_id = submitted.json()["job_id"]
        # the job's lookups are queued once the worker has started it
        _wait_until(lambda: engine.statistics["dns_lookups"] > 0)

        for i in range(OTHER_DOMAINS):
            response = client.post(
                "/a/v1/verify/single",
                headers=a(other_key),
                json={"email": f"someone@quick{i}.test", "check_smtp": False},
            )
            assert response.status_code == 200, response.text
            assert response.json()["data"]["status"] == "valid", response.text
        lookups_by_then = engine.statistics["dns_lookups"]
        job_then = client.get(f"/b/v1/verify/bulk/{job_id}", headers=b(job_key)).json()

        # The other key was answered while most of the job's lookups were still to come
        # (before the fix: after its whole first round, one MX lookup per domain).
        assert lookups_by_then - 2 * OTHER_DOMAINS < job_lookups // 4, lookups_by_then
        assert job_then["status"] == "processing"
        assert job_then["processed"] < len(emails) // 2

        # and the job itself is not starved: it completes, every address answered
        def status() -> dict[str, Any]:
            body: dict[str, Any] = client.get(
                f"/b/v1/verify/bulk/{job_id}", headers=b(job_key)
            ).json()
            return body

        _wait_until(lambda: status()["status"] != "processing")
        final = status()
        assert final["status"] == "completed"
        assert final["processed"] == len(emails)
        assert final["valid"] == len(emails)
