"""Feedback: what an email service reported of mail sent to an address (PRODUCT.md,
"Feedback"), one row per (key, event, time) under the verdicts' keyed hash, never the address.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "verdict_events",
        sa.Column("key", sa.String(32), nullable=False),
        sa.Column("event", sa.SmallInteger(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("bounce", sa.SmallInteger(), nullable=True),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("added_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("key", "event", "at"),
    )
    op.create_index("verdict_events_at", "verdict_events", ["at"])


def downgrade() -> None:
    op.drop_index("verdict_events_at", table_name="verdict_events")
    op.drop_table("verdict_events")
