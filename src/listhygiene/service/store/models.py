"""The service's tables, declared once for SQLite and PostgreSQL alike.

Only portable types are used: text ids (ULIDs, so that they sort by creation time), integers,
booleans, JSON, and UTC timestamps. The migrations under ``migrations/`` create exactly these
tables; a test compares the two, so a model change without a migration fails.

Three choices matter for the rest of the service:

- **Keys are stored hashed.** A key is 32 random bytes, so it cannot be guessed from its hash and
  a fast hash (SHA-256) is enough; slow password hashes exist for low-entropy secrets and would
  only slow every request down. The hash is unique and indexed, so authentication is a lookup.
- **Results are written as they come** (``job_results``, keyed by job and address), so a server
  killed mid-job resumes without verifying, or charging for, the same address twice.
- **Counters live in rows that one statement updates** (credits on ``api_keys``, requests on
  ``rate_windows``), so several server processes agree without a lock of their own.
"""

import os
import time
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Dialect,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from listhygiene.vocabulary import PLANS

__all__ = [
    "FORMS",
    "JOB_KINDS",
    "JOB_STATUSES",
    "PLANS",
    "ApiKey",
    "Base",
    "Job",
    "JobResult",
    "JobRow",
    "RateWindow",
    "UTCDateTime",
    "Webhook",
    "WebhookOutbox",
    "new_id",
    "utcnow",
]

FORMS = ("a", "b")
JOB_KINDS = ("file", "bulk")
JOB_STATUSES = ("pending", "processing", "completed", "failed")

# Constraint names that are the same on every database, so later migrations can name them.
_NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_id() -> str:
    """A ULID: 48 bits of milliseconds then 80 random bits, 26 characters of Crockford base32."""
    value = (time.time_ns() // 1_000_000) << 80 | int.from_bytes(os.urandom(10), "big")
    return "".join(_CROCKFORD[(value >> shift) & 31] for shift in range(125, -1, -5))


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp that is always timezone-aware UTC in Python.

    PostgreSQL keeps it as ``timestamptz``; SQLite has no time zones, so it stores naive UTC text
    and the zone is put back on reading.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: pass a timezone-aware one")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _one_of(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=_NAMING)
    type_annotation_map = {  # noqa: RUF012 (SQLAlchemy reads it as a class attribute)
        datetime: UTCDateTime(),
        dict[str, Any]: JSON(),
        list[Any]: JSON(),
        list[str]: JSON(),
    }


class ApiKey(Base):
    """An API key and its account: credits, plan and any custom rate limits."""

    __tablename__ = "api_keys"
    __table_args__ = (
        CheckConstraint(_one_of("plan", PLANS), name="plan"),
        # Belt and braces: reservations are conditional updates and never overdraw anyway.
        CheckConstraint("credits_balance >= 0", name="credits_balance"),
        CheckConstraint("credits_consumed >= 0", name="credits_consumed"),
    )

    id: Mapped[str] = mapped_column(String(26), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(200))
    # sha256 hex of the whole key. Keys carry 256 random bits, so a fast hash is safe (nobody can
    # search that space) and a slow one would only tax every request.
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    # The key's first 8 characters, so that people can tell their keys apart.
    key_prefix: Mapped[str] = mapped_column(String(8))
    plan: Mapped[str] = mapped_column(String(16), default="professional")
    credits_balance: Mapped[int] = mapped_column(BigInteger, default=0)
    credits_consumed: Mapped[int] = mapped_column(BigInteger, default=0)
    credits_added: Mapped[int] = mapped_column(BigInteger, default=0)
    # Custom rate limits; null means the default of form A or of the plan (see limits.py).
    a_single_per_minute: Mapped[int | None] = mapped_column(Integer)
    a_bulk_per_minute: Mapped[int | None] = mapped_column(Integer)
    a_file_per_minute: Mapped[int | None] = mapped_column(Integer)
    a_other_per_minute: Mapped[int | None] = mapped_column(Integer)
    b_per_hour: Mapped[int | None] = mapped_column(Integer)
    b_per_day: Mapped[int | None] = mapped_column(Integer)
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class Job(Base):
    """A file job (form A) or a bulk job (form B), and who is working on it."""

    __tablename__ = "jobs"
    __table_args__ = (
        CheckConstraint(_one_of("form", FORMS), name="form"),
        CheckConstraint(_one_of("kind", JOB_KINDS), name="kind"),
        CheckConstraint(_one_of("status", JOB_STATUSES), name="status"),
        # Claiming takes the oldest pending job (and finds processing jobs whose worker died).
        Index(None, "status", "created_at"),
        # A key lists its own jobs.
        Index(None, "api_key_id", "created_at"),
    )

    id: Mapped[str] = mapped_column(String(26), primary_key=True, default=new_id)
    api_key_id: Mapped[str] = mapped_column(ForeignKey("api_keys.id"))
    form: Mapped[str] = mapped_column(String(1))
    kind: Mapped[str] = mapped_column(String(8))
    status: Mapped[str] = mapped_column(String(16), default="pending")
    file_name: Mapped[str | None] = mapped_column(Text)
    file_size: Mapped[int | None] = mapped_column(BigInteger)
    email_column: Mapped[str | None] = mapped_column(Text)
    # The uploaded file's header, in order (form A's result file repeats it).
    columns: Mapped[list[str] | None]
    total_rows: Mapped[int] = mapped_column(Integer, default=0)
    unique_emails: Mapped[int] = mapped_column(Integer, default=0)
    check_smtp: Mapped[bool] = mapped_column(Boolean, default=True)
    webhook_url: Mapped[str | None] = mapped_column(Text)
    # Counts in the job's own form: form A's seven statuses; form B uses valid, invalid,
    # unknown and accept_all.
    valid_count: Mapped[int] = mapped_column(Integer, default=0)
    invalid_count: Mapped[int] = mapped_column(Integer, default=0)
    unknown_count: Mapped[int] = mapped_column(Integer, default=0)
    role_count: Mapped[int] = mapped_column(Integer, default=0)
    catchall_count: Mapped[int] = mapped_column(Integer, default=0)
    disposable_count: Mapped[int] = mapped_column(Integer, default=0)
    risky_count: Mapped[int] = mapped_column(Integer, default=0)
    accept_all_count: Mapped[int] = mapped_column(Integer, default=0)
    credits_reserved: Mapped[int] = mapped_column(Integer, default=0)
    credits_used: Mapped[int] = mapped_column(Integer, default=0)
    processed: Mapped[int] = mapped_column(Integer, default=0)
    error_code: Mapped[str | None] = mapped_column(String(64))
    error_message: Mapped[str | None] = mapped_column(Text)
    # Which worker holds the job, since when, and its last sign of life.
    claimed_by: Mapped[str | None] = mapped_column(Text)
    claimed_at: Mapped[datetime | None]
    heartbeat_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None]
    completed_at: Mapped[datetime | None]


class JobRow(Base):
    """One uploaded row (or submitted address) of a job, in upload order."""

    __tablename__ = "job_rows"
    __table_args__ = (
        # What is left to verify: the job's distinct addresses without a result.
        Index(None, "job_id", "address"),
    )

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    # The cell as uploaded, and the address read from it (null when there is none).
    email: Mapped[str] = mapped_column(Text)
    address: Mapped[str | None] = mapped_column(Text)
    # A file row's cells, in the order of the job's ``columns`` (null for a form B address).
    row: Mapped[list[Any] | None]


class JobResult(Base):
    """One distinct address's result within a job, written as soon as it is known."""

    __tablename__ = "job_results"

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    address: Mapped[str] = mapped_column(Text, primary_key=True)
    # Form A's and form B's status, for the results filters of either form.
    status: Mapped[str] = mapped_column(String(16))
    status_b: Mapped[str] = mapped_column(String(16))
    # ``VerificationResult.model_dump_json()`` verbatim: read back with ``model_validate_json``.
    result: Mapped[str] = mapped_column(Text)


class Webhook(Base):
    """A registered receiver of one form's events."""

    __tablename__ = "webhooks"
    __table_args__ = (
        CheckConstraint(_one_of("form", FORMS), name="form"),
        Index(None, "api_key_id", "form"),
    )

    id: Mapped[str] = mapped_column(String(26), primary_key=True, default=new_id)
    api_key_id: Mapped[str] = mapped_column(ForeignKey("api_keys.id"))
    form: Mapped[str] = mapped_column(String(1))
    url: Mapped[str] = mapped_column(Text)
    events: Mapped[list[str]]
    secret: Mapped[str] = mapped_column(Text)
    is_active: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class WebhookOutbox(Base):
    """A delivery to make, written in the same transaction as the event that causes it.

    It carries its own URL and secret, so it is delivered even if the webhook is deleted since.
    """

    __tablename__ = "webhook_outbox"
    __table_args__ = (Index(None, "delivered_at", "next_attempt_at"),)

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    webhook_id: Mapped[str | None] = mapped_column(ForeignKey("webhooks.id", ondelete="SET NULL"))
    url: Mapped[str] = mapped_column(Text)
    event: Mapped[str] = mapped_column(String(64))
    # The body exactly as it will be sent (and signed).
    payload: Mapped[str] = mapped_column(Text)
    secret: Mapped[str | None] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(default=utcnow)
    delivered_at: Mapped[datetime | None]
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class RateWindow(Base):
    """Requests counted in one fixed window of one key's bucket (e.g. ``a:single:minute``)."""

    __tablename__ = "rate_windows"
    __table_args__ = (
        # Pruning old windows.
        Index(None, "window_start"),
    )

    api_key_id: Mapped[str] = mapped_column(
        ForeignKey("api_keys.id", ondelete="CASCADE"), primary_key=True
    )
    bucket: Mapped[str] = mapped_column(String(32), primary_key=True)
    # Epoch seconds, a multiple of the window's length.
    window_start: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    count: Mapped[int] = mapped_column(Integer, default=0)
