"""Initial schema: keys, jobs and their rows and results, webhooks, the outbox, rate windows.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
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
        "api_keys",
        sa.Column("id", sa.String(length=26), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("key_prefix", sa.String(length=8), nullable=False),
        sa.Column("plan", sa.String(length=16), nullable=False),
        sa.Column("credits_balance", sa.BigInteger(), nullable=False),
        sa.Column("credits_consumed", sa.BigInteger(), nullable=False),
        sa.Column("credits_added", sa.BigInteger(), nullable=False),
        sa.Column("a_single_per_minute", sa.Integer(), nullable=True),
        sa.Column("a_bulk_per_minute", sa.Integer(), nullable=True),
        sa.Column("a_file_per_minute", sa.Integer(), nullable=True),
        sa.Column("a_other_per_minute", sa.Integer(), nullable=True),
        sa.Column("b_per_hour", sa.Integer(), nullable=True),
        sa.Column("b_per_day", sa.Integer(), nullable=True),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "plan IN ('free', 'starter', 'professional', 'enterprise')",
            name=op.f("ck_api_keys_plan"),
        ),
        sa.CheckConstraint("credits_balance >= 0", name=op.f("ck_api_keys_credits_balance")),
        sa.CheckConstraint("credits_consumed >= 0", name=op.f("ck_api_keys_credits_consumed")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("key_hash", name=op.f("uq_api_keys_key_hash")),
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(length=26), nullable=False),
        sa.Column("api_key_id", sa.String(length=26), nullable=False),
        sa.Column("form", sa.String(length=1), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("file_name", sa.Text(), nullable=True),
        sa.Column("file_size", sa.BigInteger(), nullable=True),
        sa.Column("email_column", sa.Text(), nullable=True),
        sa.Column("columns", sa.JSON(), nullable=True),
        sa.Column("total_rows", sa.Integer(), nullable=False),
        sa.Column("unique_emails", sa.Integer(), nullable=False),
        sa.Column("check_smtp", sa.Boolean(), nullable=False),
        sa.Column("webhook_url", sa.Text(), nullable=True),
        sa.Column("valid_count", sa.Integer(), nullable=False),
        sa.Column("invalid_count", sa.Integer(), nullable=False),
        sa.Column("unknown_count", sa.Integer(), nullable=False),
        sa.Column("role_count", sa.Integer(), nullable=False),
        sa.Column("catchall_count", sa.Integer(), nullable=False),
        sa.Column("disposable_count", sa.Integer(), nullable=False),
        sa.Column("risky_count", sa.Integer(), nullable=False),
        sa.Column("accept_all_count", sa.Integer(), nullable=False),
        sa.Column("credits_reserved", sa.Integer(), nullable=False),
        sa.Column("credits_used", sa.Integer(), nullable=False),
        sa.Column("processed", sa.Integer(), nullable=False),
        sa.Column("error_code", sa.String(length=64), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("claimed_by", sa.Text(), nullable=True),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("form IN ('a', 'b')", name=op.f("ck_jobs_form")),
        sa.CheckConstraint("kind IN ('file', 'bulk')", name=op.f("ck_jobs_kind")),
        sa.CheckConstraint(
            "status IN ('pending', 'processing', 'completed', 'failed')",
            name=op.f("ck_jobs_status"),
        ),
        sa.ForeignKeyConstraint(
            ["api_key_id"], ["api_keys.id"], name=op.f("fk_jobs_api_key_id_api_keys")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
    )
    op.create_index(
        op.f("ix_jobs_api_key_id_created_at"), "jobs", ["api_key_id", "created_at"], unique=False
    )
    op.create_index(
        op.f("ix_jobs_status_created_at"), "jobs", ["status", "created_at"], unique=False
    )
    op.create_table(
        "rate_windows",
        sa.Column("api_key_id", sa.String(length=26), nullable=False),
        sa.Column("bucket", sa.String(length=32), nullable=False),
        sa.Column("window_start", sa.BigInteger(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["api_key_id"],
            ["api_keys.id"],
            name=op.f("fk_rate_windows_api_key_id_api_keys"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "api_key_id", "bucket", "window_start", name=op.f("pk_rate_windows")
        ),
    )
    op.create_index(
        op.f("ix_rate_windows_window_start"), "rate_windows", ["window_start"], unique=False
    )
    op.create_table(
        "webhooks",
        sa.Column("id", sa.String(length=26), nullable=False),
        sa.Column("api_key_id", sa.String(length=26), nullable=False),
        sa.Column("form", sa.String(length=1), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.Column("secret", sa.Text(), nullable=False),
        sa.Column("is_active", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("form IN ('a', 'b')", name=op.f("ck_webhooks_form")),
        sa.ForeignKeyConstraint(
            ["api_key_id"], ["api_keys.id"], name=op.f("fk_webhooks_api_key_id_api_keys")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhooks")),
    )
    op.create_index(
        op.f("ix_webhooks_api_key_id_form"), "webhooks", ["api_key_id", "form"], unique=False
    )
    op.create_table(
        "job_results",
        sa.Column("job_id", sa.String(length=26), nullable=False),
        sa.Column("address", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("status_b", sa.String(length=16), nullable=False),
        sa.Column("result", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_job_results_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", "address", name=op.f("pk_job_results")),
    )
    op.create_table(
        "job_rows",
        sa.Column("job_id", sa.String(length=26), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("email", sa.Text(), nullable=False),
        sa.Column("address", sa.Text(), nullable=True),
        sa.Column("row", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_job_rows_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", "position", name=op.f("pk_job_rows")),
    )
    op.create_index(
        op.f("ix_job_rows_job_id_address"), "job_rows", ["job_id", "address"], unique=False
    )
    op.create_table(
        "webhook_outbox",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("webhook_id", sa.String(length=26), nullable=True),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("event", sa.String(length=64), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("secret", sa.Text(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["webhook_id"],
            ["webhooks.id"],
            name=op.f("fk_webhook_outbox_webhook_id_webhooks"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_outbox")),
    )
    op.create_index(
        op.f("ix_webhook_outbox_delivered_at_next_attempt_at"),
        "webhook_outbox",
        ["delivered_at", "next_attempt_at"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index(
        op.f("ix_webhook_outbox_delivered_at_next_attempt_at"), table_name="webhook_outbox"
    )
    op.drop_table("webhook_outbox")
    op.drop_index(op.f("ix_job_rows_job_id_address"), table_name="job_rows")
    op.drop_table("job_rows")
    op.drop_table("job_results")
    op.drop_index(op.f("ix_webhooks_api_key_id_form"), table_name="webhooks")
    op.drop_table("webhooks")
    op.drop_index(op.f("ix_rate_windows_window_start"), table_name="rate_windows")
    op.drop_table("rate_windows")
    op.drop_index(op.f("ix_jobs_status_created_at"), table_name="jobs")
    op.drop_index(op.f("ix_jobs_api_key_id_created_at"), table_name="jobs")
    op.drop_table("jobs")
    op.drop_table("api_keys")
