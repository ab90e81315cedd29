"""The database away under requests and the webhook outbox (issue 15; docs/service.md, Faults).

The store's PostgreSQL database stops taking connections (``ALLOW_CONNECTIONS false``) and its
backends are terminated, as in a failover: a request answers 503 in its form's body with
``Retry-After`` (not 500), and once the database is back the same server answers 200 (its pool
connects again). The outbox, polling meanwhile, writes one line for the outage, not a traceback
every poll.
"""

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import psycopg
import pytest

from listhygiene.sandbox import Sandbox
from listhygiene.service.app import create_app
from listhygiene.service.outbox import Outbox
from listhygiene.service.store import Store
from tests.conftest import _admin_connection
from tests.service.live import LiveServer, a, b, engine_for

TERMINATE = (
    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
    " WHERE datname = %s AND pid <> pg_backend_pid()"
)


@contextmanager
def database_away(url: str) -> Iterator[None]:
    """No connection to ``url``'s database while inside: new ones refused, open ones ended."""
    name = url.rsplit("/", 1)[1]
    try:
        admin = _admin_connection()
    except psycopg.OperationalError as exc:
        pytest.skip(f"no PostgreSQL: {exc}")
    with admin:
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        try:
            admin.execute(TERMINATE, (name,))
            yield
        finally:
            admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')


@pytest.mark.timeout(60)
def test_requests_answer_503_while_the_database_is_away_then_200(
    sandbox: Sandbox, new_pg_database: Callable[[], str]
) -> None:
    url = new_pg_database()
    with Store(url) as store:
        key, _ = store.create_key("away", 100)
        app = create_app(store, engine_for(sandbox), run_jobs=False)
        single = {"email": "alice.johnson@acme-corp.test", "check_smtp": False}
        with LiveServer(app) as root, httpx.Client(base_url=root, timeout=30) as client:

            def ask() -> tuple[httpx.Response, httpx.Response]:
                return (
                    client.post("/a/v1/verify/single", headers=a(key), json=single),
                    client.post("/b/v1/verify", headers=b(key), json={"email": single["email"]}),
                )

            assert [r.status_code for r in ask()] == [200, 200]  # the pool holds connections
            with database_away(url):
                form_a, form_b = ask()
            assert form_a.status_code == 503, form_a.text
            assert form_a.headers["Retry-After"] == "5"
            assert form_a.json()["success"] is False
            assert form_a.json()["code"] == "1000"
            assert form_b.status_code == 503, form_b.text
            assert form_b.headers["Retry-After"] == "5"
            error = form_b.json()["error"]
            assert (error["code"], error["retry_after"]) == ("SERVICE_UNAVAILABLE", 5)
            # back: the same server, its pool connected again
            form_a, form_b = ask()
            assert (form_a.status_code, form_b.status_code) == (200, 200), form_b.text
            assert form_a.json()["data"]["status"] == "valid"
            credits = client.get("/b/v1/credits", headers=b(key)).json()
            assert credits["used"] == 4  # nothing charged for the refused requests


@pytest.mark.timeout(60)
def test_the_outbox_logs_an_outage_once(
    new_pg_database: Callable[[], str], caplog: pytest.LogCaptureFixture
) -> None:
    url = new_pg_database()
    polls: list[bool] = []  # the outbox's transactions (one a poll): whether the database was away
    away = threading.Event()
    five_failed = threading.Event()

    async def run(store: Store) -> None:
        outbox = Outbox(store, poll_interval=0.01)
        await outbox.start()
        try:
            await asyncio.sleep(0.1)  # polls that work
            with database_away(url):
                away.set()
                # polls that fail, backing off (0.02, 0.04 ... s)
                await asyncio.to_thread(five_failed.wait, 30)
                away.clear()
            await asyncio.sleep(1.5)  # polls that work again, once the back-off has run out
        finally:
            await outbox.stop()

    with Store(url) as store:
        original = store.transaction

        def counting(**kwargs: Any) -> Any:
            polls.append(away.is_set())
            if sum(polls) >= 5:
                five_failed.set()
            return original(**kwargs)

        store.transaction = counting  # type: ignore[method-assign]
        with caplog.at_level(logging.INFO, logger="listhygiene.service"):
            asyncio.run(run(store))
    assert sum(polls) >= 5
    warnings = _outbox_records(caplog, logging.WARNING)
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "database is unavailable" in warnings[0].getMessage()
    assert warnings[0].exc_info is None  # one line, no traceback
    back = [r.getMessage() for r in _outbox_records(caplog, logging.INFO)]
    assert back[1:] == ["webhook outbox: polling works again"]


def _outbox_records(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.levelno >= level and r.getMessage().startswith("webhook outbox")
    ]
