"""A domain's mail provider, kept with its mail hosts: a reused verdict gives ``mx_provider``.

The result's ``mx_records`` are the MX hosts' states, not their names, so the provider cannot be
found again from what 0001 kept (issue 28). Domains stored before have none until verified again.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("verdict_domains", sa.Column("mx_provider", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("verdict_domains", "mx_provider")
