"""Tell jobs from records: the dispatcher publishes only rows a Celery job runs.

A row created by ``TaskStore.create(..., job=False)`` (an A2A agent's task that
runs in its server process) was swept like a job whose message never went out:
published under its name, every ``redispatch_after``, and counted in the outbox
backlog. The new ``job`` column says which rows are jobs; the dispatcher's two
partial indexes hold only those. Rows that exist already stay jobs, as they were
treated until now.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

TABLE = "queuestore_tasks"
LIVE_UNCLAIMED = "worker_id IS NULL AND status IN ('submitted', 'working')"
INDEXES = {  # the dispatcher's: index -> (its column, its test of dispatched_at)
    "ix_queuestore_tasks_undispatched": ("updated_at", "dispatched_at IS NULL"),
    "ix_queuestore_tasks_unclaimed_dispatched_at": ("dispatched_at", "dispatched_at IS NOT NULL"),
}


def predicate(dispatched: str, job: str | None) -> sa.TextClause:
    """An index's predicate; ``job``: the dialect's test of the new column (None before it)."""
    outbox = f"{dispatched} AND {LIVE_UNCLAIMED}"
    return sa.text(outbox if job is None else f"{job} AND {outbox}")


def recreate_indexes(*, with_job: bool) -> None:
    for index, (column, dispatched) in INDEXES.items():
        op.drop_index(index, table_name=TABLE)
        op.create_index(
            index,
            TABLE,
            [column],
            postgresql_where=predicate(dispatched, "job" if with_job else None),
            sqlite_where=predicate(dispatched, "job = 1" if with_job else None),
        )


def upgrade() -> None:
    op.add_column(TABLE, sa.Column("job", sa.Boolean(), nullable=False, server_default=sa.true()))
    recreate_indexes(with_job=True)


def downgrade() -> None:
    recreate_indexes(with_job=False)
    op.drop_column(TABLE, "job")
