"""Databases for the service's tests: a SQLite file, and a real PostgreSQL server (databases
made by ``new_pg_database`` of ``tests/conftest.py``)."""

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from listhygiene.service.store import Store
from tests.conftest import _admin_connection

__all__ = ["_admin_connection"]  # the fault tests terminate PostgreSQL backends with it

if TYPE_CHECKING:
    from listhygiene.sandbox import Sandbox

BACKENDS = ("sqlite", "postgresql")


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database URL for each backend; PostgreSQL's is shared by the session."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    return request.getfixturevalue("pg_url")


@pytest.fixture(params=BACKENDS)
def empty_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of a database that has never seen the schema, for each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'empty.db'}"
    return request.getfixturevalue("new_pg_database")()


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    with Store(db_url) as opened:
        yield opened


@pytest.fixture(scope="session")
def sandbox() -> "Iterator[Sandbox]":
    """The sample mail world, shared by every service test that verifies addresses."""
    from listhygiene.sandbox import Sandbox

    with Sandbox("sample_data/world.json") as running:
        yield running
