"""Concurrency limits: indexes of the running tasks, by owner and job, and by job.

A claim under ``ConcurrencyLimits`` counts the running tasks of its owner and
of its job; the dispatcher sweep counts them all. The indexes hold only the
rows a worker holds (``worker_id IS NOT NULL``), as many as there are runs, so
a count reads the entries of its owner's or its job's runs (at most its limit)
whatever the table's size.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

TABLE = "queuestore_tasks"
INDEXES = {
    "ix_queuestore_tasks_running": ["owner", "name"],
    "ix_queuestore_tasks_running_job": ["name"],
}


def upgrade() -> None:
    running = sa.text("worker_id IS NOT NULL")
    for name, columns in INDEXES.items():
        op.create_index(name, TABLE, columns, postgresql_where=running, sqlite_where=running)


def downgrade() -> None:
    for name in INDEXES:
        op.drop_index(name, table_name=TABLE)
