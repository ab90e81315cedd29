"""Alembic migrations shipped in the package, run without an ``alembic.ini``.

The service's store (``service/store/migrations``) and the verdict store
(``verdicts/migrations``) each keep their own migrations and version table, so one database may
hold both. Several processes may start at once, so an upgrade runs in one transaction behind a
lock: on PostgreSQL a transaction-scoped advisory lock (DDL is transactional there, so the second
process waits, then finds the schema at head and does nothing); on SQLite ``BEGIN IMMEDIATE``,
which serialises writers the same way. Upgrading a database already at head is a no-op.
"""

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, Engine, text
from sqlalchemy.engine import URL

from listhygiene.db.engine import make_engine, transaction

__all__ = ["alembic_config", "upgrade"]


def alembic_config(script_location: Path, connection: Connection | None = None) -> Config:
    """An Alembic configuration for the migrations in ``script_location``, bound to
    ``connection`` (the ``env.py`` there runs on it)."""
    config = Config()
    config.set_main_option("script_location", str(script_location))
    config.attributes["connection"] = connection
    return config


def upgrade(target: str | URL | Engine, *, script_location: Path, lock_key: int) -> None:
    """Migrate the database at ``target`` (a URL or an engine) to the head of
    ``script_location``; safe to run concurrently (``lock_key``: the PostgreSQL advisory lock)."""
    engine = target if isinstance(target, Engine) else make_engine(target)
    try:
        with transaction(engine, write=True) as connection:
            if engine.dialect.name == "postgresql":
                connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": lock_key})
            command.upgrade(alembic_config(script_location, connection), "head")
    finally:
        if engine is not target:
            engine.dispose()
