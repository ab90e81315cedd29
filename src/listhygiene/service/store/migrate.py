"""Bring a database to the newest schema with the migrations shipped in this package.

No ``alembic.ini`` is involved: the configuration is built here and points at ``migrations/``.
Several server processes may start at once, so the upgrade runs in one transaction behind a lock:
on PostgreSQL a transaction-scoped advisory lock (DDL is transactional there, so the second
process waits, then finds the schema at head and does nothing); on SQLite ``BEGIN IMMEDIATE``,
which serialises writers the same way. Upgrading a database already at head is a no-op.

The version table is ``listhygiene_alembic_version``, so a database that another application
also migrates with Alembic is not confused with ours.
"""

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, text
from sqlalchemy.engine import URL

from listhygiene.service.store.engine import make_engine, transaction

__all__ = ["MIGRATIONS", "VERSION_TABLE", "alembic_config", "current_revision", "head", "upgrade"]

MIGRATIONS = Path(__file__).with_name("migrations")
VERSION_TABLE = "listhygiene_alembic_version"
# pg_advisory_xact_lock key: any constant that other applications are unlikely to use.
_LOCK_KEY = 0x6C68_7374_6F72_65  # "lhstore"


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic configuration for this package's migrations, bound to ``connection``."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def head() -> str:
    """The newest revision shipped."""
    revision = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert revision is not None
    return revision


def current_revision(connection: Connection) -> str | None:
    """The revision the database is at (None for a database never migrated)."""
    context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision()


def upgrade(target: str | URL | Engine) -> None:
    """Migrate the database at ``target`` (a URL or an engine) to head; safe to run concurrently."""
    engine = target if isinstance(target, Engine) else make_engine(target)
    try:
        with transaction(engine, write=True) as connection:
            if engine.dialect.name == "postgresql":
                connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK_KEY})
            command.upgrade(alembic_config(connection), "head")
    finally:
        if engine is not target:
            engine.dispose()
