"""Each verdict's revision: the store's write that last changed it, so that the store's column
copy (``verdicts/column_copy.py``) catches up by reading only the rows written since it was made.

SQLite stores number their writes (the ``revision`` setting, raised in each save's
transaction); PostgreSQL stores, shared by many writers at once, keep 0 and are looked up as
before. Rows stored before this migration have revision 0.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "verdicts",
        sa.Column("revision", sa.Integer(), nullable=False, server_default=sa.text("0")),
    )
    op.create_index("verdicts_revision", "verdicts", ["revision"])


def downgrade() -> None:
    op.drop_index("verdicts_revision", table_name="verdicts")
    op.drop_column("verdicts", "revision")
