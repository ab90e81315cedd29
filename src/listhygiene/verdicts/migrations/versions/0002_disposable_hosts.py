"""The mail hosts seen receiving for listed disposable domains (issue 25).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "verdict_disposable_hosts",
        sa.Column("host", sa.String(255), primary_key=True),
        sa.Column("domain", sa.String(255), primary_key=True),
        sa.Column("seen_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("verdict_disposable_hosts")
