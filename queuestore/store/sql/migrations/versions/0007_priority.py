"""Priorities: ``submit(priority=...)``, from 0 (the default) to 9, the most urgent.

The dispatcher publishes the most urgent waiting jobs first, and the brokers
deliver by it where ``Settings(priorities=True)`` configures them. Rows that
exist already have the default, 0.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

TABLE = "queuestore_tasks"


def upgrade() -> None:
    # The range (0..9) is the store's check, as for a task's other fields: a CHECK
    # would make SQLite copy the whole table to add it.
    op.add_column(
        TABLE,
        sa.Column("priority", sa.SmallInteger(), nullable=False, server_default=sa.text("0")),
    )


def downgrade() -> None:
    op.drop_column(TABLE, "priority")
