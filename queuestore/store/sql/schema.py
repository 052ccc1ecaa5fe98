"""queuestore's tables, as typed SQLAlchemy 2 mappings: tasks, watches, callbacks, deliveries,
the rollup, the workers and the schedules.

The Alembic migrations in ``queuestore/store/sql/migrations`` build exactly this schema;
a test compares the two on SQLite and PostgreSQL.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Dialect,
    Float,
    Index,
    Integer,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    text,
    true,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from queuestore.core.models import LIVE, TaskStatus
from queuestore.store.pending import unpublished_sql


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp: ``timestamptz`` on PostgreSQL, UTC text on SQLite."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


JsonColumn = JSON().with_variant(JSONB(), "postgresql")

NullableJsonColumn = JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")
"""A JSON column where Python's None is SQL's NULL (not the JSON ``null``): tested ``IS NULL``."""

_STATUSES = ", ".join(f"'{status.value}'" for status in TaskStatus)

_LIVE_STATUSES = ", ".join(f"'{status.value}'" for status in sorted(LIVE))
_LIVE_UNIQUE = f"unique_key IS NOT NULL AND status IN ({_LIVE_STATUSES})"

CHILDREN = "parent_id IS NOT NULL"
"""A child task's rows: the tree's indexes hold only these."""
LIVE_CHILDREN = f"parent_id IS NOT NULL AND status IN ({_LIVE_STATUSES})"
PARKED_ON_CHILDREN = "waits_on IS NOT NULL AND worker_id IS NULL AND status = 'working'"
"""A run parked until its waited children end (``TaskContext.wait``)."""
NOT_STARTED_BY = "start_by IS NOT NULL AND status = 'submitted'"
LIVE_DEADLINES = f"deadline_at IS NOT NULL AND status IN ({_LIVE_STATUSES})"
RUN_DEADLINES = "run_deadline_at IS NOT NULL AND worker_id IS NOT NULL"


NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


def _partial(name: str, columns: list[str], where: str, *, unique: bool = False) -> Index:
    """A partial index, its predicate spelled alike on both dialects."""
    return Index(
        name,
        *columns,
        unique=unique,
        postgresql_where=text(where),
        sqlite_where=text(where),
    )


class TaskRow(Base):
    """One task. Columns mirror :class:`queuestore.core.models.Task`, plus bookkeeping."""

    __tablename__ = "queuestore_tasks"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    input: Mapped[dict[str, Any]] = mapped_column(JsonColumn)
    owner: Mapped[str | None] = mapped_column(String(256))
    context_id: Mapped[str | None] = mapped_column(String(256))
    status: Mapped[str] = mapped_column(String(20))
    status_message: Mapped[str | None] = mapped_column(Text)
    progress: Mapped[float | None] = mapped_column(Float)
    result: Mapped[Any] = mapped_column(JsonColumn, nullable=True)
    error: Mapped[dict[str, Any] | None] = mapped_column(JsonColumn, nullable=True)
    artifacts: Mapped[list[Any]] = mapped_column(JsonColumn)
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", JsonColumn)
    answers: Mapped[list[Any]] = mapped_column(JsonColumn)
    # 0 to 9, the most urgent: the sweep's order, and the brokers' where enabled.
    priority: Mapped[int] = mapped_column(SmallInteger, server_default=text("0"))
    # While the task is live, no other task of its owner has this key.
    unique_key: Mapped[str | None] = mapped_column(String(256))
    # The errors of the runs a job's retry policy retried, oldest first.
    errors: Mapped[list[Any]] = mapped_column(JsonColumn, server_default=text("'[]'"))
    # How many of its runs ended to wait for a time (suspended): not lost, not failed.
    suspends: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    ttl_ms: Mapped[int | None] = mapped_column(BigInteger)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    attempt: Mapped[int] = mapped_column(Integer)
    version: Mapped[int] = mapped_column(Integer)
    worker_id: Mapped[str | None] = mapped_column(String(256))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    published_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # When the job may start (submit's run_at or delay); NULL: at once.
    run_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # A Celery job runs the task: the sweep publishes it until a mark says
    # its message went out. False for a record something else runs (an A2A
    # agent in its server process), which the sweep never publishes.
    job: Mapped[bool] = mapped_column(Boolean, server_default=true())
    # The W3C trace context of the submit that created it, for the runs to join its trace.
    traceparent: Mapped[str | None] = mapped_column(String(55))
    # Child tasks: the task whose run spawned it, its key among its parent's
    # children, and how deep in the tree it is (0 for a root).
    parent_id: Mapped[str | None] = mapped_column(String(64))
    spawn_key: Mapped[str | None] = mapped_column(String(256))
    depth: Mapped[int] = mapped_column(SmallInteger, server_default=text("0"))
    # While its run waits for children: their ids, [] for every child. NULL otherwise.
    waits_on: Mapped[list[str] | None] = mapped_column(NullableJsonColumn, nullable=True)
    # Deadlines: not started by start_by, it never runs; live at deadline_at, it
    # fails; each run may take run_timeout_ms, and the claim sets run_deadline_at.
    start_by: Mapped[datetime | None] = mapped_column(UTCDateTime)
    deadline_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    run_timeout_ms: Mapped[int | None] = mapped_column(BigInteger)
    run_deadline_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    __table_args__ = (
        CheckConstraint(f"status IN ({_STATUSES})", name="status"),
        CheckConstraint("progress IS NULL OR (progress >= 0 AND progress <= 1)", name="progress"),
        # Listing: owner-scoped and unscoped, newest first by the immutable key.
        Index(None, "owner", "created_at", "id"),
        Index(None, "created_at", "id"),
        Index(None, "status", "updated_at"),
        Index(None, "context_id"),
        # Unique tasks: one live task per owner and key, and per key among the
        # unowned (a unique index holds any number of NULL owners).
        Index(
            "uq_queuestore_tasks_live_unique_key",
            "owner",
            "unique_key",
            unique=True,
            postgresql_where=text(_LIVE_UNIQUE),
            sqlite_where=text(_LIVE_UNIQUE),
        ),
        Index(
            "uq_queuestore_tasks_live_unowned_unique_key",
            "unique_key",
            unique=True,
            postgresql_where=text(f"owner IS NULL AND {_LIVE_UNIQUE}"),
            sqlite_where=text(f"owner IS NULL AND {_LIVE_UNIQUE}"),
        ),
        # The janitor: terminal rows by finish time or by their own expiry.
        Index(
            None,
            "finished_at",
            postgresql_where=text("finished_at IS NOT NULL"),
            sqlite_where=text("finished_at IS NOT NULL"),
        ),
        Index(
            None,
            "expires_at",
            postgresql_where=text("expires_at IS NOT NULL"),
            sqlite_where=text("expires_at IS NOT NULL"),
        ),
        # The sweep: unclaimed live jobs, unpublished (by their last
        # write, or by their start time) or published long ago.
        Index(
            "ix_queuestore_tasks_unpublished",
            "updated_at",
            postgresql_where=text(unpublished_sql("postgresql", published=False, scheduled=False)),
            sqlite_where=text(unpublished_sql("sqlite", published=False, scheduled=False)),
        ),
        Index(
            "ix_queuestore_tasks_scheduled",
            "run_at",
            postgresql_where=text(unpublished_sql("postgresql", published=False, scheduled=True)),
            sqlite_where=text(unpublished_sql("sqlite", published=False, scheduled=True)),
        ),
        Index(
            "ix_queuestore_tasks_unclaimed_published_at",
            "published_at",
            postgresql_where=text(unpublished_sql("postgresql", published=True)),
            sqlite_where=text(unpublished_sql("sqlite", published=True)),
        ),
        # Concurrency limits: the running tasks (held by a worker), by owner and
        # job, and by job alone (a job's count whatever the owners).
        Index(
            "ix_queuestore_tasks_running",
            "owner",
            "name",
            postgresql_where=text("worker_id IS NOT NULL"),
            sqlite_where=text("worker_id IS NOT NULL"),
        ),
        Index(
            "ix_queuestore_tasks_running_job",
            "name",
            postgresql_where=text("worker_id IS NOT NULL"),
            sqlite_where=text("worker_id IS NOT NULL"),
        ),
        # The reaper: leases that ran out.
        Index(
            None,
            "lease_expires_at",
            postgresql_where=text("lease_expires_at IS NOT NULL"),
            sqlite_where=text("lease_expires_at IS NOT NULL"),
        ),
        # The tree: a task's children newest first, one child per key, the live
        # children of a task (cancel cascades, orphans), the parked parents (wakes).
        _partial("ix_queuestore_tasks_children", ["parent_id", "created_at", "id"], CHILDREN),
        _partial(
            "uq_queuestore_tasks_spawn_key", ["parent_id", "spawn_key"], CHILDREN, unique=True
        ),
        _partial("ix_queuestore_tasks_live_children", ["parent_id"], LIVE_CHILDREN),
        _partial("ix_queuestore_tasks_parked", ["updated_at"], PARKED_ON_CHILDREN),
        # Deadlines the reaper enforces.
        _partial("ix_queuestore_tasks_start_by", ["start_by"], NOT_STARTED_BY),
        _partial("ix_queuestore_tasks_deadline_at", ["deadline_at"], LIVE_DEADLINES),
        _partial("ix_queuestore_tasks_run_deadline_at", ["run_deadline_at"], RUN_DEADLINES),
    )


class StepRow(Base):
    """A named step of a task's job, or a durable sleep (:class:`queuestore.core.models.Step`).

    Keyed by the task and the step's name, never by the order of the calls: a
    deploy that reorders a job's steps keeps every result it recorded. No
    foreign key (PostgreSQL would refuse to ``TRUNCATE`` the tasks): triggers
    delete a task's steps with it (migration 0013).
    """

    __tablename__ = "queuestore_steps"

    task_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    kind: Mapped[str] = mapped_column(String(10), server_default=text("'step'"))
    status: Mapped[str] = mapped_column(String(10))
    result: Mapped[Any] = mapped_column(JsonColumn, nullable=True)
    error: Mapped[dict[str, Any] | None] = mapped_column(NullableJsonColumn, nullable=True)
    # The task's run that recorded it, and how many runs did (failures and the last).
    attempt: Mapped[int] = mapped_column(Integer)
    tries: Mapped[int] = mapped_column(Integer, server_default=text("1"))
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (
        CheckConstraint("kind IN ('step', 'sleep')", name="kind"),
        CheckConstraint("status IN ('completed', 'failed')", name="status"),
    )


class WatchRow(Base):
    """A task some process follows by id: its writes are announced (PostgreSQL NOTIFY).

    Only the terminal and parked statuses are announced by every write; a
    progress report, an artifact or a claim is announced only while a row here
    says someone watches that task (``until`` is in the future). A change
    feed keeps the rows of the tasks it watches ``until`` a minute ahead and
    drops the ones that ran out (see :mod:`queuestore.core.watch`).
    """

    __tablename__ = "queuestore_watches"

    task_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    until: Mapped[datetime] = mapped_column(UTCDateTime)


_PENDING = "state = 'pending'"


class CallbackRow(Base):
    """A URL a task's status changes are sent to (:class:`queuestore.core.callbacks.Callback`).

    No foreign key: an A2A push config may be registered for a task id just
    before its task's row is written. A trigger deletes a task's callbacks
    and deliveries with the task.
    """

    __tablename__ = "queuestore_callbacks"

    # Unique across tasks and databases: the deliveries' event ids are made of it.
    key: Mapped[str] = mapped_column(String(32), primary_key=True)
    task_id: Mapped[str] = mapped_column(String(64))
    id: Mapped[str] = mapped_column(String(200))
    owner: Mapped[str | None] = mapped_column(String(256))
    url: Mapped[str] = mapped_column(Text)
    events: Mapped[str] = mapped_column(String(10))
    format: Mapped[str] = mapped_column(String(10))
    token: Mapped[str | None] = mapped_column(Text)
    auth_scheme: Mapped[str | None] = mapped_column(String(64))
    auth_credentials: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (
        CheckConstraint("events IN ('terminal', 'all')", name="events"),
        CheckConstraint("format IN ('webhook', 'a2a')", name="format"),
        Index("uq_queuestore_callbacks_task_id_id", "task_id", "id", unique=True),
    )


class DeliveryRow(Base):
    """One status change to send to one callback: written by a trigger.

    ``AFTER UPDATE OF status ON queuestore_tasks`` inserts a row for each
    callback of the task that wants the new status, in the transaction of the
    change (see migration 0009), with the task as the change left it.
    """

    __tablename__ = "queuestore_deliveries"

    # INTEGER PRIMARY KEY on SQLite (the rowid), an identity on PostgreSQL: the
    # order of a callback's deliveries, which is the order of its task's changes.
    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True
    )
    callback_key: Mapped[str] = mapped_column(String(32))
    task_id: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(20))
    version: Mapped[int] = mapped_column(Integer)
    task: Mapped[dict[str, Any]] = mapped_column(JsonColumn)
    state: Mapped[str] = mapped_column(String(10), server_default=text("'pending'"))
    tries: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # Pending: when it is due; while a try runs, when it may be taken again.
    next_try_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_error: Mapped[str | None] = mapped_column(Text)
    response_status: Mapped[int | None] = mapped_column(Integer)

    __table_args__ = (
        CheckConstraint("state IN ('pending', 'delivered', 'dead')", name="state"),
        Index(None, "task_id", "id"),
        # The head of each callback's queue: its oldest pending delivery.
        Index(
            "ix_queuestore_deliveries_pending",
            "callback_key",
            "id",
            postgresql_where=text(_PENDING),
            sqlite_where=text(_PENDING),
        ),
        Index(
            "ix_queuestore_deliveries_due",
            "next_try_at",
            postgresql_where=text(_PENDING),
            sqlite_where=text(_PENDING),
        ),
    )


ROLLUP_LOG = Table(
    "queuestore_rollup_log",
    Base.metadata,
    # NULL: a change of a current count (metric: the status); else the series' minute.
    Column("minute", UTCDateTime(), nullable=True),
    Column("metric", String(20), nullable=False),
    Column("name", String(200), nullable=False),
    # The owner of a current count ('' for none); always '' in the series.
    Column("owner", String(256), nullable=False),
    Column("bucket", SmallInteger(), nullable=False),
    Column("delta", Integer(), nullable=False),
)
"""The rollup's fresh entries: triggers on the tasks and the deliveries append one per
change (no row is ever updated, so writers never wait on each other), and
``fold_rollup`` moves them into :class:`RollupCountRow`, :class:`RollupSeriesRow` and
:class:`RollupJobRow` (migration 0012 and :mod:`queuestore.core.rollup` say what is counted)."""


class RollupCountRow(Base):
    """How many tasks of a job and owner ('' for none) are in a status, as folded."""

    __tablename__ = "queuestore_rollup_counts"

    status: Mapped[str] = mapped_column(String(20), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    owner: Mapped[str] = mapped_column(String(256), primary_key=True)
    count: Mapped[int] = mapped_column(BigInteger)


class RollupSeriesRow(Base):
    """Every job's count of a metric (in a bucket) in the step of ``step`` seconds from
    ``start``, as folded."""

    __tablename__ = "queuestore_rollup_series"

    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    start: Mapped[datetime] = mapped_column(UTCDateTime, primary_key=True)
    metric: Mapped[str] = mapped_column(String(20), primary_key=True)
    bucket: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    count: Mapped[int] = mapped_column(BigInteger)


class RollupJobRow(Base):
    """A job's count of a metric (in a bucket) in the hour from ``start``, as folded."""

    __tablename__ = "queuestore_rollup_jobs"

    start: Mapped[datetime] = mapped_column(UTCDateTime, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    metric: Mapped[str] = mapped_column(String(20), primary_key=True)
    bucket: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    count: Mapped[int] = mapped_column(BigInteger)


class WorkerRow(Base):
    """A worker process, as its heartbeat last wrote it (see :class:`queuestore.Worker`)."""

    __tablename__ = "queuestore_workers"

    id: Mapped[str] = mapped_column(String(300), primary_key=True)
    host: Mapped[str] = mapped_column(String(256))
    pid: Mapped[int] = mapped_column(Integer)
    node: Mapped[str | None] = mapped_column(String(256))
    pool: Mapped[str | None] = mapped_column(String(64))
    concurrency: Mapped[int | None] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    beat_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # The ids of the tasks it ran at its last beat.
    running: Mapped[list[Any]] = mapped_column(JsonColumn)


_DUE = "paused = false AND next_run_at IS NOT NULL"


class ScheduleRow(Base):
    """A schedule (see :class:`queuestore.Schedule`): its job, its timing, its next tick."""

    __tablename__ = "queuestore_schedules"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    input: Mapped[dict[str, Any]] = mapped_column(JsonColumn)
    owner: Mapped[str | None] = mapped_column(String(256))
    cron: Mapped[str | None] = mapped_column(String(200))
    every_ms: Mapped[int | None] = mapped_column(BigInteger)
    timezone: Mapped[str] = mapped_column(String(64))
    catch_up: Mapped[str] = mapped_column(String(10))
    catch_up_limit: Mapped[int] = mapped_column(Integer)
    paused: Mapped[bool] = mapped_column(Boolean)
    next_run_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_run_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_task_id: Mapped[str | None] = mapped_column(String(64))
    anchor_at: Mapped[datetime] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    version: Mapped[int] = mapped_column(Integer)

    __table_args__ = (
        CheckConstraint("catch_up IN ('skip', 'once', 'each')", name="catch_up"),
        CheckConstraint("(cron IS NULL) <> (every_ms IS NULL)", name="timing"),
        Index(None, "owner", "created_at", "id"),
        # What beat's tick reads: the schedules due, soonest first.
        _partial("ix_queuestore_schedules_due", ["next_run_at"], _DUE),
    )


class RateStartRow(Base):
    """One start a rate limit counted: its bucket (``job`` or ``job|key``), its cost, and
    when it stops counting (its start plus the limit's period)."""

    __tablename__ = "queuestore_rate_starts"

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True
    )
    bucket: Mapped[str] = mapped_column(String(600))
    cost: Mapped[int] = mapped_column(Integer)
    until: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (Index(None, "bucket", "until"), Index(None, "until"))


class RateWaitRow(Base):
    """The latest time given to a task of a bucket waiting for a start: the next waiter's
    comes one share of the period after it, so waiting tasks come back one by one."""

    __tablename__ = "queuestore_rate_waits"

    bucket: Mapped[str] = mapped_column(String(600), primary_key=True)
    next_wake: Mapped[datetime] = mapped_column(UTCDateTime)


class PauseRow(Base):
    """A pause in force: no task of a job, an owner or a key starts until ``until``
    (NULL: until resumed). ``target`` is ``kind:value``."""

    __tablename__ = "queuestore_pauses"

    target: Mapped[str] = mapped_column(String(600), primary_key=True)
    kind: Mapped[str] = mapped_column(String(10))
    value: Mapped[str] = mapped_column(String(512))
    until: Mapped[datetime | None] = mapped_column(UTCDateTime)
    reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (CheckConstraint("kind IN ('job', 'owner', 'key')", name="kind"),)
