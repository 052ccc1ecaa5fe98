"""Suspended runs: how many times a task's run ended to wait, with no error and no loss.

A run may end to wait for a time (a durable sleep, a paused rate-limit key)
without failing and without a worker dying: the task stays ``working``,
unclaimed, until its ``run_at``. ``suspends`` counts those ends, so that the
reaper, which tells lost runs from the others by counting, does not count them
as lost. Rows that exist already have suspended nothing: 0.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "queuestore_tasks",
        sa.Column("suspends", sa.Integer(), nullable=False, server_default=sa.text("0")),
    )


def downgrade() -> None:
    op.drop_column("queuestore_tasks", "suspends")
