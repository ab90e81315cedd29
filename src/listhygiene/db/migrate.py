"""Alembic migrations shipped in the package, run without an ``alembic.ini``.

The service's store (``service/store/migrations``) and the verdict store
(``verdicts/migrations``) each keep their own migrations and version table, so one database may
hold both. Several processes may start at once, so an upgrade runs in one transaction behind a
lock: on PostgreSQL a transaction-scoped advisory lock (DDL is transactional there, so the second
process waits, then finds the schema at head and does nothing); on SQLite ``BEGIN IMMEDIATE``,
which serialises writers the same way. Upgrading a database already at head is a no-op.

A caller that names its version table and head revision skips Alembic altogether when the
database is at head already, as it is on every open but the first after an upgrade of the
package: importing Alembic alone cost ~0.15 s, a tenth of a nightly run's extra over a run without
a verdict store (docs/pipeline.md, "Nightly reruns").
"""

from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy import Connection, Engine, text
from sqlalchemy.engine import URL

from listhygiene.db.engine import make_engine, transaction

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = ["alembic_config", "at_head", "upgrade"]


def alembic_config(script_location: Path, connection: Connection | None = None) -> "Config":
    """An Alembic configuration for the migrations in ``script_location``, bound to
    ``connection`` (the ``env.py`` there runs on it)."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(script_location))
    config.attributes["connection"] = connection
    return config


def at_head(engine: Engine, version_table: str, head: str) -> bool:
    """Whether ``version_table`` says the database is at ``head`` and nothing else (a database
    never migrated has no such table: False)."""
    table = sa.table(version_table, sa.column("version_num"))
    try:
        with engine.connect() as connection:
            versions = connection.execute(sa.select(table.c.version_num)).scalars().all()
    except sa.exc.DBAPIError:
        return False
    return versions == [head]


def upgrade(
    target: str | URL | Engine,
    *,
    script_location: Path,
    lock_key: int,
    version_table: str | None = None,
    head: str | None = None,
) -> None:
    """Migrate the database at ``target`` (a URL or an engine) to the head of
    ``script_location``; safe to run concurrently (``lock_key``: the PostgreSQL advisory lock).
    With ``version_table`` and ``head`` (the newest revision shipped, which a test checks
    against the scripts), a database at head is left as it is without Alembic."""
    engine = target if isinstance(target, Engine) else make_engine(target)
    try:
        if version_table is not None and head is not None and at_head(engine, version_table, head):
            return
        from alembic import command

        with transaction(engine, write=True) as connection:
            if engine.dialect.name == "postgresql":
                connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": lock_key})
            command.upgrade(alembic_config(script_location, connection), "head")
    finally:
        if engine is not target:
            engine.dispose()
