"""The service's one store fixture, on a SQLite file and on a real PostgreSQL server (databases
made by ``new_pg_database`` of ``tests/conftest.py``, which also gives the ``sandbox``).

``store`` lives as long as its test module, on each backend the module's ``STORE_BACKENDS``
names (both by default): a module whose tests share one running server names ``("sqlite",)``.
Tests make their own keys, so they do not see one another's rows (PostgreSQL's database is even
shared by the whole session).

``base_url`` is the module's server on loopback over that store, verifying against the
``sandbox``, and ``client`` an HTTP client of it; a module whose server needs other options
(a webhook resolver, an engine of its own) defines its own ``base_url``.
"""

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from listhygiene.service.store import Store
from tests.conftest import _admin_connection, sandbox

if TYPE_CHECKING:
    import httpx

    from listhygiene.sandbox import Sandbox

# the fault tests terminate PostgreSQL backends with _admin_connection; tests/clients/conftest.py
# takes the sandbox fixture from here (it is tests/conftest.py's)
__all__ = ["_admin_connection", "sandbox"]

BACKENDS = ("sqlite", "postgresql")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "db_url" in metafunc.fixturenames:
        backends = getattr(metafunc.module, "STORE_BACKENDS", BACKENDS)
        metafunc.parametrize("db_url", backends, indirect=True, scope="module")


@pytest.fixture(scope="module")
def db_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The store's database URL on one backend, for one test module."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path_factory.mktemp('store') / 'store.db'}"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture(params=BACKENDS)
def empty_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of a database that has never seen the schema, for each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'empty.db'}"
    return str(request.getfixturevalue("new_pg_database")())


@pytest.fixture(scope="module")
def store(db_url: str) -> Iterator[Store]:
    """The store of a test module's tests (and of the server they share, if any)."""
    with Store(db_url) as opened:
        yield opened


@pytest.fixture(scope="module")
def base_url(sandbox: "Sandbox", store: Store) -> Iterator[str]:
    """The module's server: the service on its ``store``, verifying against its ``sandbox``."""
    from listhygiene.service.app import create_app
    from tests.service.live import LiveServer, engine_for

    with LiveServer(create_app(store, engine_for(sandbox))) as url:
        yield url


@pytest.fixture
def client(base_url: str) -> "Iterator[httpx.Client]":
    import httpx

    with httpx.Client(base_url=base_url, timeout=30) as opened:
        yield opened
