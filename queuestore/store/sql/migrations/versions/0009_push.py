"""Push: callbacks, and their deliveries written by a trigger with each status change.

``queuestore_callbacks`` holds the URLs a task's status changes go to;
``queuestore_deliveries`` is the outbox. A trigger ``AFTER UPDATE OF status``
on ``queuestore_tasks`` inserts one delivery per callback that wants the new
status (and belongs to the task's owner: a callback registered for a task id
before its task exists reports nothing to anyone else), with the task as the
change left it, in the change's own transaction:
every write path (the compare-and-set updates, claims, the reaper) commits
its events with it, and none pays more than an index probe of the callbacks
when its task has none. On PostgreSQL the trigger also NOTIFYs
``queuestore_deliveries`` (``<task id>:<status>``) when it inserted one,
which wakes the deliverers.
Two more delete a task's callbacks and deliveries with the task (and with a
TRUNCATE of the tasks, on PostgreSQL).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from queuestore.store.sql.schema import JsonColumn, UTCDateTime

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

PENDING = sa.text("state = 'pending'")
TERMINAL = "('completed', 'failed', 'cancelled', 'rejected')"

# The task as a delivery carries it: no input, answers or bookkeeping.
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
_JSON_FIELDS = {"result", "error", "artifacts", "metadata"}

POSTGRES_SNAPSHOT = "jsonb_build_object({})".format(
    ", ".join(f"'{field}', NEW.{field}" for field in _SNAPSHOT_FIELDS)
)
SQLITE_SNAPSHOT = "json_object({})".format(
    ", ".join(
        f"'{field}', json(NEW.\"{field}\")" if field in _JSON_FIELDS else f"'{field}', NEW.{field}"
        for field in _SNAPSHOT_FIELDS
    )
)

_INSERT = """
INSERT INTO queuestore_deliveries
    (callback_key, task_id, status, version, task, created_at, next_attempt_at)
SELECT c.key, NEW.id, NEW.status, NEW.version, {snapshot}, NEW.updated_at, NEW.updated_at
FROM queuestore_callbacks AS c
WHERE c.task_id = NEW.id AND c.owner {same} NEW.owner
    AND (c.events = 'all' OR NEW.status IN {terminal})"""

POSTGRES = [
    f"""
CREATE FUNCTION queuestore_push_status() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
{_INSERT.format(snapshot=POSTGRES_SNAPSHOT, same="IS NOT DISTINCT FROM", terminal=TERMINAL)};
    IF FOUND THEN
        PERFORM pg_notify('queuestore_deliveries', NEW.id || ':' || NEW.status);
    END IF;
    RETURN NULL;
END
$$""",
    """
CREATE TRIGGER queuestore_push_status
AFTER UPDATE OF status ON queuestore_tasks
FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
EXECUTE FUNCTION queuestore_push_status()""",
    """
CREATE FUNCTION queuestore_forget_callbacks() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM queuestore_deliveries WHERE task_id IN (SELECT id FROM gone);
    DELETE FROM queuestore_callbacks WHERE task_id IN (SELECT id FROM gone);
    RETURN NULL;
END
$$""",
    """
CREATE TRIGGER queuestore_forget_callbacks
AFTER DELETE ON queuestore_tasks
REFERENCING OLD TABLE AS gone
FOR EACH STATEMENT EXECUTE FUNCTION queuestore_forget_callbacks()""",
    """
CREATE FUNCTION queuestore_truncate_callbacks() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE queuestore_deliveries, queuestore_callbacks;
    RETURN NULL;
END
$$""",
    """
CREATE TRIGGER queuestore_truncate_callbacks
AFTER TRUNCATE ON queuestore_tasks
FOR EACH STATEMENT EXECUTE FUNCTION queuestore_truncate_callbacks()""",
]

SQLITE = [
    f"""
CREATE TRIGGER queuestore_push_status
AFTER UPDATE OF status ON queuestore_tasks
FOR EACH ROW WHEN OLD.status IS NOT NEW.status
BEGIN
{_INSERT.format(snapshot=SQLITE_SNAPSHOT, same="IS", terminal=TERMINAL)};
END""",
    """
CREATE TRIGGER queuestore_forget_callbacks
AFTER DELETE ON queuestore_tasks
FOR EACH ROW
BEGIN
    DELETE FROM queuestore_deliveries WHERE task_id = OLD.id;
    DELETE FROM queuestore_callbacks WHERE task_id = OLD.id;
END""",
]

DROP_POSTGRES = [
    "DROP TRIGGER IF EXISTS queuestore_truncate_callbacks ON queuestore_tasks",
    "DROP FUNCTION IF EXISTS queuestore_truncate_callbacks()",
    "DROP TRIGGER IF EXISTS queuestore_forget_callbacks ON queuestore_tasks",
    "DROP FUNCTION IF EXISTS queuestore_forget_callbacks()",
    "DROP TRIGGER IF EXISTS queuestore_push_status ON queuestore_tasks",
    "DROP FUNCTION IF EXISTS queuestore_push_status()",
]
DROP_SQLITE = [
    "DROP TRIGGER IF EXISTS queuestore_forget_callbacks",
    "DROP TRIGGER IF EXISTS queuestore_push_status",
]


def upgrade() -> None:
    op.create_table(
        "queuestore_callbacks",
        sa.Column("key", sa.String(32), nullable=False),
        sa.Column("task_id", sa.String(64), nullable=False),
        sa.Column("id", sa.String(200), nullable=False),
        sa.Column("owner", sa.String(256), nullable=True),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("events", sa.String(10), nullable=False),
        sa.Column("format", sa.String(10), nullable=False),
        sa.Column("token", sa.Text(), nullable=True),
        sa.Column("auth_scheme", sa.String(64), nullable=True),
        sa.Column("auth_credentials", sa.Text(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.CheckConstraint("events IN ('terminal', 'all')", name="ck_queuestore_callbacks_events"),
        sa.CheckConstraint("format IN ('webhook', 'a2a')", name="ck_queuestore_callbacks_format"),
        sa.PrimaryKeyConstraint("key", name="pk_queuestore_callbacks"),
    )
    op.create_index(
        "uq_queuestore_callbacks_task_id_id", "queuestore_callbacks", ["task_id", "id"], unique=True
    )
    op.create_table(
        "queuestore_deliveries",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("callback_key", sa.String(32), nullable=False),
        sa.Column("task_id", sa.String(64), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("task", JsonColumn, nullable=False),
        sa.Column("state", sa.String(10), server_default=sa.text("'pending'"), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("next_attempt_at", UTCDateTime(), nullable=True),
        sa.Column("delivered_at", UTCDateTime(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("response_status", sa.Integer(), nullable=True),
        sa.CheckConstraint(
            "state IN ('pending', 'delivered', 'dead')", name="ck_queuestore_deliveries_state"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_queuestore_deliveries"),
    )
    op.create_index(
        "ix_queuestore_deliveries_task_id_id", "queuestore_deliveries", ["task_id", "id"]
    )
    op.create_index(
        "ix_queuestore_deliveries_pending",
        "queuestore_deliveries",
        ["callback_key", "id"],
        postgresql_where=PENDING,
        sqlite_where=PENDING,
    )
    op.create_index(
        "ix_queuestore_deliveries_due",
        "queuestore_deliveries",
        ["next_attempt_at"],
        postgresql_where=PENDING,
        sqlite_where=PENDING,
    )
    for statement in POSTGRES if op.get_bind().dialect.name == "postgresql" else SQLITE:
        op.execute(statement)


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for statement in DROP_POSTGRES if postgres else DROP_SQLITE:
        op.execute(statement)
    op.drop_table("queuestore_deliveries")
    op.drop_table("queuestore_callbacks")
