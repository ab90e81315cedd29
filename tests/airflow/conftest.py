"""One Airflow home for the whole test session: a temporary ``AIRFLOW_HOME`` with a SQLite
metadata database, migrated once, the repository's ``dags/`` as its DAG folder.

Airflow reads its configuration when first imported, so the environment is set here, when
pytest loads this conftest, before any test module imports Airflow. Connections are given as
``AIRFLOW_CONN_*`` environment variables (JSON), which tasks run by ``dag.test()`` read in
process.
"""

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import sandbox_settings, write_contacts

REPO = Path(__file__).resolve().parents[2]
HOME = Path(tempfile.mkdtemp(prefix="listhygiene-airflow-home-"))
AIRFLOW_ENV = {
    "AIRFLOW_HOME": str(HOME),
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{HOME}/airflow.db",
    "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(HOME / "logs"),
}
if "airflow" in sys.modules and os.environ.get("AIRFLOW_HOME") != str(HOME):
    raise RuntimeError("airflow was imported before tests/airflow/conftest.py set AIRFLOW_HOME")
os.environ.update(AIRFLOW_ENV)


@pytest.fixture(scope="session")
def airflow_home() -> Iterator[Path]:
    """The migrated Airflow home (created once per session, removed at the end)."""
    from airflow.utils.db import initdb

    initdb()
    yield HOME
    shutil.rmtree(HOME, ignore_errors=True)


@pytest.fixture(scope="session")
def sandbox() -> Iterator[Any]:
    from listhygiene.sandbox import Sandbox

    with Sandbox(REPO / "sample_data" / "world.json") as running:
        yield running


#: The engine settings the tests' connections carry in their extras.
EXTRA_SETTINGS = (
    "dns_server",
    "smtp_port",
    "allow_private_mx",
    "helo",
    "smtp_timeout",
    "dns_timeout",
)


def engine_extras(sandbox: Any, **changes: Any) -> dict[str, Any]:
    """The local engine's settings against the sandbox (``sandbox_settings(sandbox, **changes)``),
    as a connection's extras."""
    settings = sandbox_settings(sandbox, **changes)
    given = {name: getattr(settings, name) for name in EXTRA_SETTINGS}
    return {"backend": "local", **given, "retry_delays": list(settings.retry_delays)}


#: Four rows of the sample world: valid, a missing mailbox, a blank cell, a syntax error.
SMALL = """id,name,email
1,Ann,natalie.roberts@riverbend-foods.test
2,Bob,nobody-here@riverbend-foods.test
3,Blank,
4,Typo,ann@@riverbend-foods.test
"""


@pytest.fixture
def contacts(tmp_path: Path) -> Path:
    """:data:`SMALL` as a CSV file."""
    return write_contacts(tmp_path, SMALL)


def set_connection(
    monkeypatch: pytest.MonkeyPatch, conn_id: str, conn_type: str, **fields: Any
) -> None:
    value = {"conn_type": conn_type, **fields}
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(value))


def set_postgres_connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, url: str) -> None:
    """An Airflow Postgres connection ``conn_id`` to the database at the SQLAlchemy ``url``."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    set_connection(
        monkeypatch,
        conn_id,
        "postgres",
        host=parsed.host,
        port=parsed.port or 5432,
        login=parsed.username,
        password=parsed.password or "",
        schema=parsed.database,
    )


@pytest.fixture
def local_connection(
    airflow_home: Path, sandbox: Any, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """``listhygiene_default``: the local engine, verifying against the sandbox."""
    extras = engine_extras(sandbox)
    set_connection(monkeypatch, "listhygiene_default", "listhygiene", extra=extras)
    return extras


@pytest.fixture(scope="session")
def service(sandbox: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """(base URL, store, gated engine) of the project's service on loopback, verifying against
    the sandbox."""
    from listhygiene.service.app import create_app
    from listhygiene.service.store import Store
    from tests.service.live import LiveServer, engine_for

    path = tmp_path_factory.mktemp("service") / "service.db"
    with Store(f"sqlite:///{path}") as store:
        engine = GatedEngine(engine_for(sandbox, retry_delays=()))
        app = create_app(store, engine)
        with LiveServer(app) as url:
            yield url, store, engine


@pytest.fixture
def form_b_connection(service: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Any]:
    """``listhygiene_default`` on the service in form B, with a fresh key: (key, store)."""
    url, store, _ = service
    key, _ = store.create_key("airflow", 5_000)
    set_connection(
        monkeypatch,
        "listhygiene_default",
        "listhygiene",
        host=f"{url}/b/v1",
        password=key,
        extra={"backend": "form-b"},
    )
    return key, store


def jobs_of(store: Any, key: str) -> list[Any]:
    """The remote jobs a key has submitted, from the service's own database."""
    from sqlalchemy import select

    from listhygiene.service.store.models import Job

    row = store.authenticate(key)
    assert row is not None
    with store.transaction() as conn:
        return list(conn.execute(select(Job.id).where(Job.api_key_id == row.id)).scalars())


class GatedEngine:
    """The service's engine behind a gate: while it is closed, jobs stay unfinished, so a test
    decides when a remote job may end (no race with the operator's one status check)."""

    def __init__(self, engine: Any) -> None:
        import threading

        self.engine = engine
        self.gate = threading.Event()
        self.gate.set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)

    async def verify_each(self, *args: Any, **kwargs: Any) -> Any:
        import asyncio

        await asyncio.to_thread(self.gate.wait)
        async for item in self.engine.verify_each(*args, **kwargs):
            yield item


@pytest.fixture(autouse=True)
def quick_first_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """In process no scheduler races the trigger: its first check comes 3 s after a deferral
    here, instead of 15 s, to keep the tests quick."""
    from listhygiene_airflow.triggers.verification import VerificationJobTrigger

    monkeypatch.setattr(VerificationJobTrigger, "first_check_after", 3.0)
