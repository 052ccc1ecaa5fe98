"""One word per concept: a task's message is *published*, a delivery is *tried*.

``dispatched_at`` becomes ``published_at`` (with the two sweep indexes that
named it), and a delivery's ``attempts`` and ``next_attempt_at`` become
``tries`` and ``next_try_at``, so that "attempt" only ever names a task's run.
SQLite rewrites the indexes and the trigger that read a renamed column;
PostgreSQL keeps its indexes, and the push trigger's function, whose body is
text, is replaced with one that writes the new column.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

TASKS = "queuestore_tasks"
DELIVERIES = "queuestore_deliveries"
COLUMNS = [(TASKS, "dispatched_at", "published_at"), (DELIVERIES, "attempts", "tries")]
DELIVERY_DUE = (DELIVERIES, "next_attempt_at", "next_try_at")
INDEXES = [
    ("ix_queuestore_tasks_undispatched", "ix_queuestore_tasks_unpublished"),
    ("ix_queuestore_tasks_unclaimed_dispatched_at", "ix_queuestore_tasks_unclaimed_published_at"),
]
_UNCLAIMED = "worker_id IS NULL AND status IN ('submitted', 'working')"
SQLITE_INDEXES = {  # index -> (its column, its predicate), as the schema declares them
    "ix_queuestore_tasks_unpublished": (
        "updated_at",
        f"job = 1 AND published_at IS NULL AND {_UNCLAIMED} AND run_at IS NULL",
    ),
    "ix_queuestore_tasks_unclaimed_published_at": (
        "published_at",
        f"job = 1 AND published_at IS NOT NULL AND {_UNCLAIMED}",
    ),
}

# The function of migration 0009's trigger, writing the delivery's first try time.
_PUSH_FUNCTION = """
CREATE OR REPLACE FUNCTION queuestore_push_status() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
INSERT INTO queuestore_deliveries
    (callback_key, task_id, status, version, task, created_at, {due})
SELECT c.key, NEW.id, NEW.status, NEW.version, jsonb_build_object({snapshot}),
    NEW.updated_at, NEW.updated_at
FROM queuestore_callbacks AS c
WHERE c.task_id = NEW.id AND c.owner IS NOT DISTINCT FROM NEW.owner
    AND (c.events = 'all' OR NEW.status IN ('completed', 'failed', 'cancelled', 'rejected'));
    IF FOUND THEN
        PERFORM pg_notify('queuestore_deliveries', NEW.id || ':' || NEW.status);
    END IF;
    RETURN NULL;
END
$$"""
_SNAPSHOT_FIELDS = [
    "id",
    "name",
    "context_id",
    "status",
    "status_message",
    "progress",
    "result",
    "error",
    "artifacts",
    "metadata",
    "created_at",
    "updated_at",
    "started_at",
    "finished_at",
    "attempt",
    "version",
]
_SNAPSHOT = ", ".join(f"'{field}', NEW.{field}" for field in _SNAPSHOT_FIELDS)


def _rename(table: str, old: str, new: str) -> None:
    op.execute(f'ALTER TABLE {table} RENAME COLUMN "{old}" TO "{new}"')


def _move(forward: bool) -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for table, old, new in [*COLUMNS, DELIVERY_DUE]:
        _rename(table, *((old, new) if forward else (new, old)))
    for old, new in INDEXES:
        before, after = (old, new) if forward else (new, old)
        if postgres:
            op.execute(f"ALTER INDEX {before} RENAME TO {after}")
        else:
            column, predicate = SQLITE_INDEXES[new]
            if not forward:
                column = column.replace("published_at", "dispatched_at")
                predicate = predicate.replace("published_at", "dispatched_at")
            op.drop_index(before, table_name=TASKS)
            op.create_index(after, TASKS, [column], sqlite_where=sa.text(predicate))
    if postgres:
        due = DELIVERY_DUE[2] if forward else DELIVERY_DUE[1]
        op.execute(_PUSH_FUNCTION.format(due=due, snapshot=_SNAPSHOT))


def upgrade() -> None:
    _move(forward=True)


def downgrade() -> None:
    _move(forward=False)
