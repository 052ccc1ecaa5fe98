"""Unique tasks: ``submit(unique_key=...)`` while a live task of the owner has the key
returns that task instead of creating another.

Two unique partial indexes hold the key of every live task, per owner and
among the unowned (one index could not: it holds any number of NULL owners):
the database, not a read before the insert, keeps two racing submits from
both creating a task. A task that ends frees its key.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

TABLE = "queuestore_tasks"
OWNED = "uq_queuestore_tasks_live_unique_key"
UNOWNED = "uq_queuestore_tasks_live_unowned_unique_key"
LIVE_UNIQUE = (
    "unique_key IS NOT NULL AND status IN "
    "('auth_required', 'input_required', 'submitted', 'working')"
)


def upgrade() -> None:
    op.add_column(TABLE, sa.Column("unique_key", sa.String(256), nullable=True))
    for name, columns, predicate in (
        (OWNED, ["owner", "unique_key"], LIVE_UNIQUE),
        (UNOWNED, ["unique_key"], f"owner IS NULL AND {LIVE_UNIQUE}"),
    ):
        op.create_index(
            name,
            TABLE,
            columns,
            unique=True,
            postgresql_where=sa.text(predicate),
            sqlite_where=sa.text(predicate),
        )


def downgrade() -> None:
    op.drop_index(UNOWNED, table_name=TABLE)
    op.drop_index(OWNED, table_name=TABLE)
    op.drop_column(TABLE, "unique_key")
