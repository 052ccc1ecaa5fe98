"""Job retries: the errors of the runs a job's retry policy retried.

A job registered with ``@job(app, retry=Retry(...))`` that raises one of the
policy's exceptions goes back to wait for its next run (``run_at``, the
backoff) instead of failing; each such run's error is appended to ``errors``,
so ``get`` shows every attempt's error and the final failure its last.
Rows that exist already have retried nothing: ``[]``.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from queuestore.store.sql.schema import JsonColumn

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "queuestore_tasks",
        sa.Column("errors", JsonColumn, nullable=False, server_default=sa.text("'[]'")),
    )


def downgrade() -> None:
    op.drop_column("queuestore_tasks", "errors")
