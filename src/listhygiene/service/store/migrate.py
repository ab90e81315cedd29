"""Bring a database to the service store's newest schema (``migrations/``; run as every
package migration is, :mod:`listhygiene.db.migrate`: no ``alembic.ini``, safe when several
server processes start at once).

The version table is ``listhygiene_alembic_version``, so a database that another application
also migrates with Alembic is not confused with ours.
"""

from pathlib import Path

from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine
from sqlalchemy.engine import URL

from listhygiene.db import migrate

__all__ = ["MIGRATIONS", "VERSION_TABLE", "alembic_config", "current_revision", "head", "upgrade"]

MIGRATIONS = Path(__file__).with_name("migrations")
VERSION_TABLE = "listhygiene_alembic_version"
# pg_advisory_xact_lock key: any constant that other applications are unlikely to use.
_LOCK_KEY = 0x6C68_7374_6F72_65  # "lhstore"


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic configuration for the store's migrations, bound to ``connection``."""
    return migrate.alembic_config(MIGRATIONS, connection)


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
    migrate.upgrade(target, script_location=MIGRATIONS, lock_key=_LOCK_KEY)
