"""Announce the writes to a task someone watches by id.

Until now only terminal and parked statuses were announced (PostgreSQL NOTIFY),
so a progress report or an artifact reached an A2A ``SubscribeToTask`` or an
HTTP stream at the change feed's next poll, up to 0.5 s later. Announcing every
write cost concurrent writers a third of their throughput (a NOTIFY serialises
commits). ``queuestore_watches`` names the tasks a process follows by id; a
write to one of them is announced in the same statement, and other writes pay
one index probe of this small table.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from queuestore.store.sql.schema import UTCDateTime

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "queuestore_watches",
        sa.Column("task_id", sa.String(64), nullable=False),
        sa.Column("until", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("task_id", name="pk_queuestore_watches"),
    )


def downgrade() -> None:
    op.drop_table("queuestore_watches")
