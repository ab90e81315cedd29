"""The verdict store's tables, and their migrations (``migrations/``, Alembic, like the service's
store, with a version table of their own so that one database may hold both).

- ``verdicts``: one row per address, keyed by a keyed hash of the normalised address (never the
  address), with the result columns in their compact form (``codes.py``), how and when it was
  checked, and the status before that.
- ``verdict_domains``: a domain's mail hosts, reputation and mail provider as last seen (per
  domain, not per address: a million addresses share a few thousand domains), by id.
- ``verdict_settings``: the store's own settings (the hashing key's fingerprint; on SQLite the
  revision and generation that the column copy is checked against, ``verdicts/column_copy.py``).
- ``verdict_disposable_hosts``: the mail hosts seen receiving for listed disposable domains, each
  with the domain (public list entries, not addresses): a host seen with two of them is a
  disposable service's, and a new throwaway domain on it is disposable (docs/engine.md, "Lists").
"""

from pathlib import Path

import sqlalchemy as sa
from sqlalchemy import Engine

from listhygiene.db import migrate

__all__ = [
    "HEAD_REVISION",
    "VERSION_TABLE",
    "disposable_hosts",
    "domains",
    "events",
    "metadata",
    "settings",
    "upgrade",
    "verdicts",
]

VERSION_TABLE = "listhygiene_verdicts_version"
#: The newest migration in ``migrations/versions``: a store at it opens without Alembic
#: (``listhygiene.db.migrate``). A new migration moves it; a test checks it against the scripts.
HEAD_REVISION = "0005"
_MIGRATIONS = Path(__file__).with_name("migrations")
_LOCK_KEY = 0x6C68_7665_7264_6963  # "lhverdic": pg_advisory_xact_lock while migrating

metadata = sa.MetaData()

verdicts = sa.Table(
    "verdicts",
    metadata,
    sa.Column("key", sa.String(32), primary_key=True),
    # statuses, reasons and outcomes are codes of verdicts/codes.py; flags a bitmask
    sa.Column("status", sa.SmallInteger(), nullable=False),
    sa.Column("reason", sa.SmallInteger(), nullable=True),
    sa.Column("flags", sa.SmallInteger(), nullable=False),
    sa.Column("score", sa.Float(), nullable=False),
    sa.Column("domain_id", sa.Integer(), nullable=False),
    sa.Column("response_time", sa.Integer(), nullable=False),
    sa.Column("credits_used", sa.SmallInteger(), nullable=False),
    sa.Column("dns", sa.SmallInteger(), nullable=False),
    sa.Column("mailbox", sa.SmallInteger(), nullable=False),
    sa.Column("undetermined_reason", sa.SmallInteger(), nullable=True),
    sa.Column("backend", sa.String(32), nullable=False),
    #: Unix seconds: compared across dialects without time-zone surprises.
    sa.Column("checked_at", sa.Float(), nullable=False),
    sa.Column("previous_status", sa.SmallInteger(), nullable=True),
    sa.Column("previous_checked_at", sa.Float(), nullable=True),
    #: SQLite: the store's write that last changed the row (migration 0004); 0 on PostgreSQL
    sa.Column("revision", sa.Integer(), nullable=False, server_default=sa.text("0")),
    sa.Index("verdicts_checked_at", "checked_at"),
    sa.Index("verdicts_revision", "revision"),
    # SQLite: the rows live in the key's B-tree, one seek per lookup instead of two
    sqlite_with_rowid=False,
)

domains = sa.Table(
    "verdict_domains",
    metadata,
    sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
    sa.Column("domain", sa.Text(), nullable=False, unique=True),
    sa.Column("mx_records", sa.Text(), nullable=False),  # JSON list
    sa.Column("domain_reputation", sa.Text(), nullable=False),  # JSON object
    sa.Column("checked_at", sa.Float(), nullable=False),
    # who runs the domain's mail (engine/providers.py), null when not known: migration 0003
    sa.Column("mx_provider", sa.Text(), nullable=True),
)

settings = sa.Table(
    "verdict_settings",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text(), nullable=False),
)

disposable_hosts = sa.Table(
    "verdict_disposable_hosts",
    metadata,
    sa.Column("host", sa.String(255), primary_key=True),
    sa.Column("domain", sa.String(255), primary_key=True),
    sa.Column("seen_at", sa.Float(), nullable=False),
)

events = sa.Table(
    "verdict_events",
    metadata,
    sa.Column("key", sa.String(32), primary_key=True),
    # a code of verdicts/feedback.py's EVENTS; the bounce's kind a code of its BOUNCES (or null)
    sa.Column("event", sa.SmallInteger(), primary_key=True),
    #: Unix seconds, as ``verdicts.checked_at``.
    sa.Column("at", sa.Float(), primary_key=True),
    sa.Column("bounce", sa.SmallInteger(), nullable=True),
    sa.Column("source", sa.String(16), nullable=False),
    sa.Column("added_at", sa.Float(), nullable=False),
    sa.Index("verdict_events_at", "at"),
)


def upgrade(engine: Engine) -> None:
    """Bring the store to the newest schema; safe when several processes start at once."""
    migrate.upgrade(
        engine,
        script_location=_MIGRATIONS,
        lock_key=_LOCK_KEY,
        version_table=VERSION_TABLE,
        head=HEAD_REVISION,
    )
