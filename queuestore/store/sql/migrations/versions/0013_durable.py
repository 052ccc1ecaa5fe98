"""Durable work inside a task: named steps, child tasks, and deadlines the store enforces.

``queuestore_steps`` holds each task's named steps (and durable sleeps) with
their results, keyed by the task and the step's name; triggers delete them
with their task, as 0009's do a task's callbacks. The tasks gain their place
in a tree (``parent_id``, ``spawn_key``, ``depth``), the children a parked run
waits for (``waits_on``), and their deadlines (``start_by``, ``deadline_at``,
``run_timeout_ms``, and the current run's ``run_deadline_at``).

A task parked on its children is not pending: the three sweep indexes are
built again with ``waits_on IS NULL`` in their predicate (the pending rule,
:mod:`queuestore.store.pending`). Rows that exist already are roots, wait for
nothing and have no deadline: every new column is NULL, or 0 for ``depth``.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-07
"""

from __future__ import annotations

from typing import NamedTuple

import sqlalchemy as sa
from alembic import op

from queuestore.store.sql.schema import JsonColumn, NullableJsonColumn, UTCDateTime

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

TASKS = "queuestore_tasks"
STEPS = "queuestore_steps"
_LIVE = "('auth_required', 'input_required', 'submitted', 'working')"
_PENDING = "('submitted', 'working')"


class _Index(NamedTuple):
    name: str
    columns: list[str]
    predicate: str
    unique: bool = False


NEW_INDEXES = [
    _Index(
        "ix_queuestore_tasks_children", ["parent_id", "created_at", "id"], "parent_id IS NOT NULL"
    ),
    _Index(
        "uq_queuestore_tasks_spawn_key", ["parent_id", "spawn_key"], "parent_id IS NOT NULL", True
    ),
    _Index(
        "ix_queuestore_tasks_live_children",
        ["parent_id"],
        f"parent_id IS NOT NULL AND status IN {_LIVE}",
    ),
    _Index(
        "ix_queuestore_tasks_parked",
        ["updated_at"],
        "waits_on IS NOT NULL AND worker_id IS NULL AND status = 'working'",
    ),
    _Index(
        "ix_queuestore_tasks_start_by",
        ["start_by"],
        "start_by IS NOT NULL AND status = 'submitted'",
    ),
    _Index(
        "ix_queuestore_tasks_deadline_at",
        ["deadline_at"],
        f"deadline_at IS NOT NULL AND status IN {_LIVE}",
    ),
    _Index(
        "ix_queuestore_tasks_run_deadline_at",
        ["run_deadline_at"],
        "run_deadline_at IS NOT NULL AND worker_id IS NOT NULL",
    ),
]


def _sweep_indexes(dialect: str, *, parked: bool) -> list[tuple[str, str, str]]:
    """The three sweep indexes, as 0010 left them or (``parked``) with the new pending rule."""
    job = "job = 1" if dialect == "sqlite" else "job"
    waits = " AND waits_on IS NULL" if parked else ""
    pending = f"worker_id IS NULL{waits} AND status IN {_PENDING}"
    return [
        (
            "ix_queuestore_tasks_unpublished",
            "updated_at",
            f"{job} AND published_at IS NULL AND {pending} AND run_at IS NULL",
        ),
        (
            "ix_queuestore_tasks_scheduled",
            "run_at",
            f"{job} AND published_at IS NULL AND {pending} AND run_at IS NOT NULL",
        ),
        (
            "ix_queuestore_tasks_unclaimed_published_at",
            "published_at",
            f"{job} AND published_at IS NOT NULL AND {pending}",
        ),
    ]


POSTGRES = [
    """
CREATE FUNCTION queuestore_forget_steps() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM queuestore_steps WHERE task_id IN (SELECT id FROM gone);
    RETURN NULL;
END
$$""",
    """
CREATE TRIGGER queuestore_forget_steps
AFTER DELETE ON queuestore_tasks
REFERENCING OLD TABLE AS gone
FOR EACH STATEMENT EXECUTE FUNCTION queuestore_forget_steps()""",
    """
CREATE FUNCTION queuestore_truncate_steps() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE queuestore_steps;
    RETURN NULL;
END
$$""",
    """
CREATE TRIGGER queuestore_truncate_steps
AFTER TRUNCATE ON queuestore_tasks
FOR EACH STATEMENT EXECUTE FUNCTION queuestore_truncate_steps()""",
]
SQLITE = [
    """
CREATE TRIGGER queuestore_forget_steps
AFTER DELETE ON queuestore_tasks
FOR EACH ROW
BEGIN
    DELETE FROM queuestore_steps WHERE task_id = OLD.id;
END""",
]
DROP_POSTGRES = [
    "DROP TRIGGER IF EXISTS queuestore_truncate_steps ON queuestore_tasks",
    "DROP FUNCTION IF EXISTS queuestore_truncate_steps()",
    "DROP TRIGGER IF EXISTS queuestore_forget_steps ON queuestore_tasks",
    "DROP FUNCTION IF EXISTS queuestore_forget_steps()",
]
DROP_SQLITE = ["DROP TRIGGER IF EXISTS queuestore_forget_steps"]


def _columns() -> list[sa.Column[object]]:
    """The tasks' new columns (made anew for each use: a column belongs to one table)."""
    return [
        sa.Column("parent_id", sa.String(64), nullable=True),
        sa.Column("spawn_key", sa.String(256), nullable=True),
        sa.Column("depth", sa.SmallInteger(), nullable=False, server_default=sa.text("0")),
        sa.Column("waits_on", NullableJsonColumn, nullable=True),
        sa.Column("start_by", UTCDateTime(), nullable=True),
        sa.Column("deadline_at", UTCDateTime(), nullable=True),
        sa.Column("run_timeout_ms", sa.BigInteger(), nullable=True),
        sa.Column("run_deadline_at", UTCDateTime(), nullable=True),
    ]


def _rebuild_sweep_indexes(*, parked: bool) -> None:
    dialect = op.get_bind().dialect.name
    for name, column, predicate in _sweep_indexes(dialect, parked=parked):
        op.drop_index(name, table_name=TASKS)
        op.create_index(
            name,
            TASKS,
            [column],
            postgresql_where=sa.text(predicate),
            sqlite_where=sa.text(predicate),
        )


def upgrade() -> None:
    for column in _columns():
        op.add_column(TASKS, column)
    for index in NEW_INDEXES:
        op.create_index(
            index.name,
            TASKS,
            index.columns,
            unique=index.unique,
            postgresql_where=sa.text(index.predicate),
            sqlite_where=sa.text(index.predicate),
        )
    _rebuild_sweep_indexes(parked=True)
    op.create_table(
        STEPS,
        sa.Column("task_id", sa.String(64), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("kind", sa.String(10), server_default=sa.text("'step'"), nullable=False),
        sa.Column("status", sa.String(10), nullable=False),
        sa.Column("result", JsonColumn, nullable=True),
        sa.Column("error", NullableJsonColumn, nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("tries", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=False),
        sa.Column("finished_at", UTCDateTime(), nullable=False),
        sa.CheckConstraint("kind IN ('step', 'sleep')", name="ck_queuestore_steps_kind"),
        sa.CheckConstraint("status IN ('completed', 'failed')", name="ck_queuestore_steps_status"),
        sa.PrimaryKeyConstraint("task_id", "name", name="pk_queuestore_steps"),
    )
    for statement in POSTGRES if op.get_bind().dialect.name == "postgresql" else SQLITE:
        op.execute(statement)


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for statement in DROP_POSTGRES if postgres else DROP_SQLITE:
        op.execute(statement)
    op.drop_table(STEPS)
    _rebuild_sweep_indexes(parked=False)
    for index in NEW_INDEXES:
        op.drop_index(index.name, table_name=TASKS)
    for column in reversed(_columns()):
        op.drop_column(TASKS, column.name)
