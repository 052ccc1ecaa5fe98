"""Schedules kept in the database: a job, its input and owner, a cron expression or an
interval, a catch-up policy, and the next tick that beat's ``queuestore.schedules``
task compares and sets.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from queuestore.store.sql.schema import JsonColumn, UTCDateTime

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

SCHEDULES = "queuestore_schedules"
_DUE = "paused = false AND next_run_at IS NOT NULL"


def upgrade() -> None:
    op.create_table(
        SCHEDULES,
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("input", JsonColumn, nullable=False),
        sa.Column("owner", sa.String(256), nullable=True),
        sa.Column("cron", sa.String(200), nullable=True),
        sa.Column("every_ms", sa.BigInteger(), nullable=True),
        sa.Column("timezone", sa.String(64), nullable=False),
        sa.Column("catch_up", sa.String(10), nullable=False),
        sa.Column("catch_up_limit", sa.Integer(), nullable=False),
        sa.Column("paused", sa.Boolean(), nullable=False),
        sa.Column("next_run_at", UTCDateTime(), nullable=True),
        sa.Column("last_run_at", UTCDateTime(), nullable=True),
        sa.Column("last_task_id", sa.String(64), nullable=True),
        sa.Column("anchor_at", UTCDateTime(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.CheckConstraint(
            "catch_up IN ('skip', 'once', 'each')", name="ck_queuestore_schedules_catch_up"
        ),
        sa.CheckConstraint(
            "(cron IS NULL) <> (every_ms IS NULL)", name="ck_queuestore_schedules_timing"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_queuestore_schedules"),
    )
    op.create_index(
        "ix_queuestore_schedules_owner_created_at_id", SCHEDULES, ["owner", "created_at", "id"]
    )
    op.create_index(
        "ix_queuestore_schedules_due",
        SCHEDULES,
        ["next_run_at"],
        postgresql_where=sa.text(_DUE),
        sqlite_where=sa.text(_DUE),
    )


def downgrade() -> None:
    op.drop_table(SCHEDULES)
