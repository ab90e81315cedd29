"""The verdict store: verdicts by keyed hash, what each domain's mail hosts were, and settings.

Revision ID: 0001
Revises:
Create Date: 2026-11-25
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "verdicts",
        sa.Column("key", sa.String(32), primary_key=True),
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
        sa.Column("checked_at", sa.Float(), nullable=False),
        sa.Column("previous_status", sa.SmallInteger(), nullable=True),
        sa.Column("previous_checked_at", sa.Float(), nullable=True),
        sqlite_with_rowid=False,
    )
    op.create_index("verdicts_checked_at", "verdicts", ["checked_at"])
    op.create_table(
        "verdict_domains",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("domain", sa.Text(), nullable=False, unique=True),
        sa.Column("mx_records", sa.Text(), nullable=False),
        sa.Column("domain_reputation", sa.Text(), nullable=False),
        sa.Column("checked_at", sa.Float(), nullable=False),
    )
    op.create_table(
        "verdict_settings",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("verdict_settings")
    op.drop_table("verdict_domains")
    op.drop_index("verdicts_checked_at", table_name="verdicts")
    op.drop_table("verdicts")
