"""Flow control: the starts rate limits count, the waiting tasks' turns, and pauses.

``queuestore_rate_starts`` logs each start a rate limit counts, with the time
it stops counting; ``queuestore_rate_waits`` keeps, per bucket, the latest
time given to a task waiting for a start; ``queuestore_pauses`` holds the
pauses in force, of a job, an owner or a key. No task column changes.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from queuestore.store.sql.schema import UTCDateTime

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "queuestore_rate_starts",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("bucket", sa.String(600), nullable=False),
        sa.Column("cost", sa.Integer(), nullable=False),
        sa.Column("until", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_queuestore_rate_starts"),
    )
    op.create_index(
        "ix_queuestore_rate_starts_bucket_until", "queuestore_rate_starts", ["bucket", "until"]
    )
    op.create_index("ix_queuestore_rate_starts_until", "queuestore_rate_starts", ["until"])
    op.create_table(
        "queuestore_rate_waits",
        sa.Column("bucket", sa.String(600), nullable=False),
        sa.Column("next_wake", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("bucket", name="pk_queuestore_rate_waits"),
    )
    op.create_table(
        "queuestore_pauses",
        sa.Column("target", sa.String(600), nullable=False),
        sa.Column("kind", sa.String(10), nullable=False),
        sa.Column("value", sa.String(512), nullable=False),
        sa.Column("until", UTCDateTime(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.CheckConstraint("kind IN ('job', 'owner', 'key')", name="ck_queuestore_pauses_kind"),
        sa.PrimaryKeyConstraint("target", name="pk_queuestore_pauses"),
    )


def downgrade() -> None:
    op.drop_table("queuestore_pauses")
    op.drop_table("queuestore_rate_waits")
    op.drop_index("ix_queuestore_rate_starts_until", table_name="queuestore_rate_starts")
    op.drop_index("ix_queuestore_rate_starts_bucket_until", table_name="queuestore_rate_starts")
    op.drop_table("queuestore_rate_starts")
