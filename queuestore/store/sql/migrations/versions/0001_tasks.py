"""Create the queuestore_tasks table and its indexes.

Revision ID: 0001
Revises:
Create Date: 2026-12-03
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from queuestore.store.sql.schema import UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TABLE = "queuestore_tasks"
STATUSES = (
    "'submitted', 'working', 'input_required', 'auth_required', "
    "'completed', 'failed', 'cancelled', 'rejected'"
)
UNDISPATCHED = "dispatched_at IS NULL AND worker_id IS NULL AND status IN ('submitted', 'working')"
UNCLAIMED_DISPATCHED = (
    "dispatched_at IS NOT NULL AND worker_id IS NULL AND status IN ('submitted', 'working')"
)


def json_column() -> sa.types.TypeEngine[Any]:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        TABLE,
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("input", json_column(), nullable=False),
        sa.Column("owner", sa.String(256), nullable=True),
        sa.Column("context_id", sa.String(256), nullable=True),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("status_message", sa.Text(), nullable=True),
        sa.Column("progress", sa.Float(), nullable=True),
        sa.Column("result", json_column(), nullable=True),
        sa.Column("error", json_column(), nullable=True),
        sa.Column("artifacts", json_column(), nullable=False),
        sa.Column("metadata", json_column(), nullable=False),
        sa.Column("answers", json_column(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=True),
        sa.Column("finished_at", UTCDateTime(), nullable=True),
        sa.Column("ttl_ms", sa.BigInteger(), nullable=True),
        sa.Column("expires_at", UTCDateTime(), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("worker_id", sa.String(256), nullable=True),
        sa.Column("lease_expires_at", UTCDateTime(), nullable=True),
        sa.Column("dispatched_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_queuestore_tasks"),
        sa.CheckConstraint(f"status IN ({STATUSES})", name="ck_queuestore_tasks_status"),
        sa.CheckConstraint(
            "progress IS NULL OR (progress >= 0 AND progress <= 1)",
            name="ck_queuestore_tasks_progress",
        ),
    )
    op.create_index("ix_queuestore_tasks_owner_created_at_id", TABLE, ["owner", "created_at", "id"])
    op.create_index("ix_queuestore_tasks_created_at_id", TABLE, ["created_at", "id"])
    op.create_index("ix_queuestore_tasks_status_updated_at", TABLE, ["status", "updated_at"])
    op.create_index("ix_queuestore_tasks_context_id", TABLE, ["context_id"])
    for column in ("finished_at", "expires_at", "lease_expires_at"):
        predicate = sa.text(f"{column} IS NOT NULL")
        op.create_index(
            f"ix_queuestore_tasks_{column}",
            TABLE,
            [column],
            postgresql_where=predicate,
            sqlite_where=predicate,
        )
    op.create_index(
        "ix_queuestore_tasks_undispatched",
        TABLE,
        ["updated_at"],
        postgresql_where=sa.text(UNDISPATCHED),
        sqlite_where=sa.text(UNDISPATCHED),
    )
    op.create_index(
        "ix_queuestore_tasks_unclaimed_dispatched_at",
        TABLE,
        ["dispatched_at"],
        postgresql_where=sa.text(UNCLAIMED_DISPATCHED),
        sqlite_where=sa.text(UNCLAIMED_DISPATCHED),
    )


def downgrade() -> None:
    op.drop_table(TABLE)
