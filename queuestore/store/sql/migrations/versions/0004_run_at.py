"""Scheduled start: a job's ``run_at``, and the dispatcher's index of scheduled jobs.

``TaskQueue.submit(run_at=..., delay=...)`` keeps a job's start time in the
row, so that it survives the loss of the broker and of every worker: the
dispatcher sweep publishes the job as its start comes near, with a countdown
of at most ``TaskQueue.schedule_ahead``. The sweep's index of unpublished jobs
now holds only those without a start time (it orders them by their last write);
the new partial index holds those with one, by their start.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from queuestore.store.sql.schema import UTCDateTime

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

TABLE = "queuestore_tasks"
UNPUBLISHED = "dispatched_at IS NULL AND worker_id IS NULL AND status IN ('submitted', 'working')"
JOB = {"postgresql": "job", "sqlite": "job = 1"}


def predicate(dialect: str, run_at: str | None) -> sa.TextClause:
    """The predicate of an index of unpublished jobs; ``run_at``: its test of the new column."""
    terms = [JOB[dialect], UNPUBLISHED] + ([] if run_at is None else [f"run_at {run_at}"])
    return sa.text(" AND ".join(terms))


def index(name: str, column: str, run_at: str | None) -> None:
    op.create_index(
        name,
        TABLE,
        [column],
        postgresql_where=predicate("postgresql", run_at),
        sqlite_where=predicate("sqlite", run_at),
    )


def upgrade() -> None:
    op.add_column(TABLE, sa.Column("run_at", UTCDateTime(), nullable=True))
    op.drop_index("ix_queuestore_tasks_undispatched", table_name=TABLE)
    index("ix_queuestore_tasks_undispatched", "updated_at", "IS NULL")
    index("ix_queuestore_tasks_scheduled", "run_at", "IS NOT NULL")


def downgrade() -> None:
    op.drop_index("ix_queuestore_tasks_scheduled", table_name=TABLE)
    op.drop_index("ix_queuestore_tasks_undispatched", table_name=TABLE)
    index("ix_queuestore_tasks_undispatched", "updated_at", None)
    op.drop_column(TABLE, "run_at")
