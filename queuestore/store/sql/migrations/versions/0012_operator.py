"""The operator's view: the rollup the overview reads, the workers' heartbeats, trace contexts.

The rollup counts what happens to the tasks so that the overview never scans
them (:mod:`queuestore.core.rollup` has the rule, which the in-memory store
keeps in Python). Triggers append entries to ``queuestore_rollup_log`` and
never update a row, so that two writers never wait on each other's counts;
``fold_rollup`` (the janitor, and each read of the overview) moves the entries
into ``queuestore_rollup_counts`` (tasks by status, job and owner now),
``queuestore_rollup_series`` (every job's counts per minute and per quarter
hour, their histograms per five minutes and per hour) and
``queuestore_rollup_jobs`` (each job's, per hour). The triggers:

- a task inserted counts in its status, and as submitted in its minute (a
  row loaded whole, already started or ended, counts those too);
- a status change moves the task's count; the first claim (``submitted`` to
  ``working``) counts as started, with its wait from submit or from the
  scheduled start (histogram ``wait``); an end counts in its status, with its
  run time from the first claim if it started (histogram ``run``);
- a run released while the task stays ``working`` counts as retried (its
  errors grew), or, unless it was suspended, as lost (the reaper's retry);
- a deleted task leaves its count (and a TRUNCATE empties the counts);
- a delivery that dies counts as dead, under its task's job.

Durations go in the buckets of ``queuestore.core.rollup.BOUNDS_MS``: 2^(i/4) ms,
written here as they were when this revision was made.

Existing rows are counted once here: every task in its status, and the series
of the last two days from their timestamps.

``queuestore_workers`` holds one row per worker process, written by its
heartbeat; ``traceparent`` is the W3C trace context of the submit that created
a task.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-08
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from queuestore.store.sql.schema import JsonColumn, UTCDateTime

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

BOUNDS = [2.0 ** (index / 4) for index in range(109)]
TERMINAL = "('completed', 'failed', 'cancelled', 'rejected')"
LOG = "INSERT INTO queuestore_rollup_log (minute, metric, name, owner, bucket, delta)"

# -- PostgreSQL ---------------------------------------------------------------

_BOUNDS_ARRAY = "{" + ",".join(repr(bound) for bound in BOUNDS) + "}"

PG_BUCKET = f"""
CREATE FUNCTION queuestore_rollup_bucket(since timestamptz, till timestamptz)
RETURNS smallint LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN since IS NULL OR till IS NULL THEN -1 ELSE width_bucket(
        CAST(extract(epoch FROM till - since) AS double precision) * 1000,
        CAST('{_BOUNDS_ARRAY}' AS double precision[])) END::smallint
$$"""

PG_DUE = "greatest(NEW.created_at, coalesce(NEW.run_at, NEW.created_at))"

PG_INSERTED = f"""
CREATE FUNCTION queuestore_rollup_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    {LOG} VALUES
        (NULL, NEW.status, NEW.name, coalesce(NEW.owner, ''), -1, 1),
        (date_trunc('minute', NEW.created_at), 'submitted', NEW.name, '', -1, 1);
    IF NEW.started_at IS NOT NULL THEN
        {LOG} VALUES
            (date_trunc('minute', NEW.started_at), 'started', NEW.name, '', -1, 1),
            (date_trunc('minute', NEW.started_at), 'wait', NEW.name, '',
                queuestore_rollup_bucket({PG_DUE}, NEW.started_at), 1);
    END IF;
    IF NEW.status IN {TERMINAL} AND NEW.finished_at IS NOT NULL THEN
        {LOG} VALUES (date_trunc('minute', NEW.finished_at), NEW.status, NEW.name, '', -1, 1);
        IF NEW.started_at IS NOT NULL THEN
            {LOG} VALUES (date_trunc('minute', NEW.finished_at), 'run', NEW.name, '',
                queuestore_rollup_bucket(NEW.started_at, NEW.finished_at), 1);
        END IF;
    END IF;
    RETURN NULL;
END
$$"""

_MOVED = """(NULL, OLD.status, OLD.name, coalesce(OLD.owner, ''), -1, -1),
            (NULL, NEW.status, NEW.name, coalesce(NEW.owner, ''), -1, 1)"""

PG_UPDATED = f"""
CREATE FUNCTION queuestore_rollup_updated() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    minute timestamptz := date_trunc('minute', NEW.updated_at);
BEGIN
    IF OLD.status IS NOT DISTINCT FROM NEW.status THEN
        IF NEW.suspends <= OLD.suspends THEN
            {LOG} VALUES (minute, CASE WHEN jsonb_array_length(NEW.errors)
                > jsonb_array_length(OLD.errors) THEN 'retried' ELSE 'lost' END,
                NEW.name, '', -1, 1);
        END IF;
    ELSIF OLD.status = 'submitted' AND NEW.status = 'working' THEN
        {LOG} VALUES {_MOVED},
            (minute, 'started', NEW.name, '', -1, 1),
            (minute, 'wait', NEW.name, '', queuestore_rollup_bucket({PG_DUE}, NEW.started_at), 1);
    ELSIF NEW.status IN {TERMINAL} AND NEW.started_at IS NOT NULL THEN
        {LOG} VALUES {_MOVED},
            (minute, NEW.status, NEW.name, '', -1, 1),
            (minute, 'run', NEW.name, '',
                queuestore_rollup_bucket(NEW.started_at, NEW.finished_at), 1);
    ELSIF NEW.status IN {TERMINAL} THEN
        {LOG} VALUES {_MOVED}, (minute, NEW.status, NEW.name, '', -1, 1);
    ELSE
        {LOG} VALUES {_MOVED};
    END IF;
    RETURN NULL;
END
$$"""

PG_DELETED = f"""
CREATE FUNCTION queuestore_rollup_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    {LOG}
    SELECT NULL, status, name, coalesce(owner, ''), -1, -count(*) FROM gone
    GROUP BY status, name, owner;
    RETURN NULL;
END
$$"""

PG_TRUNCATED = """
CREATE FUNCTION queuestore_rollup_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM queuestore_rollup_log WHERE minute IS NULL;
    TRUNCATE queuestore_rollup_counts;
    RETURN NULL;
END
$$"""

PG_DEAD = f"""
CREATE FUNCTION queuestore_rollup_dead() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    {LOG} VALUES (date_trunc('minute', now()), 'dead', coalesce(
        (SELECT name FROM queuestore_tasks WHERE id = NEW.task_id), ' '), '', -1, 1);
    RETURN NULL;
END
$$"""

POSTGRES = [
    PG_BUCKET,
    PG_INSERTED,
    PG_UPDATED,
    PG_DELETED,
    PG_TRUNCATED,
    PG_DEAD,
    """
CREATE TRIGGER queuestore_rollup_inserted AFTER INSERT ON queuestore_tasks
FOR EACH ROW EXECUTE FUNCTION queuestore_rollup_inserted()""",
    """
CREATE TRIGGER queuestore_rollup_updated AFTER UPDATE OF status, worker_id ON queuestore_tasks
FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status OR (OLD.worker_id IS NOT NULL
    AND NEW.worker_id IS NULL AND NEW.status = 'working'))
EXECUTE FUNCTION queuestore_rollup_updated()""",
    """
CREATE TRIGGER queuestore_rollup_deleted AFTER DELETE ON queuestore_tasks
REFERENCING OLD TABLE AS gone
FOR EACH STATEMENT EXECUTE FUNCTION queuestore_rollup_deleted()""",
    """
CREATE TRIGGER queuestore_rollup_truncated AFTER TRUNCATE ON queuestore_tasks
FOR EACH STATEMENT EXECUTE FUNCTION queuestore_rollup_truncated()""",
    """
CREATE TRIGGER queuestore_rollup_dead AFTER UPDATE OF state ON queuestore_deliveries
FOR EACH ROW WHEN (NEW.state = 'dead' AND OLD.state <> 'dead')
EXECUTE FUNCTION queuestore_rollup_dead()""",
]

DROP_POSTGRES = [
    "DROP TRIGGER IF EXISTS queuestore_rollup_dead ON queuestore_deliveries",
    *(
        f"DROP TRIGGER IF EXISTS queuestore_rollup_{kind} ON queuestore_tasks"
        for kind in ("truncated", "deleted", "updated", "inserted")
    ),
    *(
        f"DROP FUNCTION IF EXISTS queuestore_rollup_{kind}()"
        for kind in ("dead", "truncated", "deleted", "updated", "inserted")
    ),
    "DROP FUNCTION IF EXISTS queuestore_rollup_bucket(timestamptz, timestamptz)",
]

# -- SQLite -------------------------------------------------------------------


def _sqlite_minute(column: str) -> str:
    """``column`` (a stored timestamp) truncated to its minute, stored the same way."""
    return f"substr({column}, 1, 16) || ':00.000000'"


def _sqlite_bucket(since: str, till: str) -> str:
    """The bucket of the time from ``since`` to ``till``, to the microsecond."""
    milliseconds = (
        f"(strftime('%s', {till}) - strftime('%s', {since})) * 1000.0"
        f" + (CAST(substr({till}, 21, 6) AS INTEGER)"
        f" - CAST(substr({since}, 21, 6) AS INTEGER)) / 1000.0"
    )
    ladder = " ".join(f"WHEN d < {bound!r} THEN {index}" for index, bound in enumerate(BOUNDS))
    return (
        f"CASE WHEN {since} IS NULL OR {till} IS NULL THEN -1 ELSE "
        f"(SELECT CASE {ladder} ELSE {len(BOUNDS)} END FROM (SELECT {milliseconds} AS d)) END"
    )


SQLITE_DUE = "max(NEW.created_at, coalesce(NEW.run_at, NEW.created_at))"
SQLITE_STARTED = _sqlite_bucket(SQLITE_DUE, "NEW.started_at")
SQLITE_RAN = _sqlite_bucket("NEW.started_at", "NEW.finished_at")


def _sqlite_started(minute: str) -> str:
    return f"""
    {LOG} SELECT {minute}, 'started', NEW.name, '', -1, 1 WHERE NEW.started_at IS NOT NULL;
    {LOG} SELECT {minute}, 'wait', NEW.name, '', {SQLITE_STARTED}, 1
    WHERE NEW.started_at IS NOT NULL;"""


def _sqlite_ended(minute: str) -> str:
    return f"""
    {LOG} SELECT {minute}, NEW.status, NEW.name, '', -1, 1 WHERE NEW.finished_at IS NOT NULL;
    {LOG} SELECT {minute}, 'run', NEW.name, '', {SQLITE_RAN}, 1
    WHERE NEW.started_at IS NOT NULL AND NEW.finished_at IS NOT NULL;"""


_NEW_MINUTE = _sqlite_minute("NEW.updated_at")

SQLITE = [
    f"""
CREATE TRIGGER queuestore_rollup_inserted AFTER INSERT ON queuestore_tasks
FOR EACH ROW BEGIN
    {LOG} VALUES
        (NULL, NEW.status, NEW.name, coalesce(NEW.owner, ''), -1, 1),
        ({_sqlite_minute("NEW.created_at")}, 'submitted', NEW.name, '', -1, 1);
    {_sqlite_started(_sqlite_minute("NEW.started_at"))}
END""",
    f"""
CREATE TRIGGER queuestore_rollup_inserted_ended AFTER INSERT ON queuestore_tasks
FOR EACH ROW WHEN NEW.status IN {TERMINAL} BEGIN
    {_sqlite_ended(_sqlite_minute("NEW.finished_at"))}
END""",
    f"""
CREATE TRIGGER queuestore_rollup_status AFTER UPDATE OF status ON queuestore_tasks
FOR EACH ROW WHEN OLD.status IS NOT NEW.status BEGIN
    {LOG} VALUES
        (NULL, OLD.status, OLD.name, coalesce(OLD.owner, ''), -1, -1),
        (NULL, NEW.status, NEW.name, coalesce(NEW.owner, ''), -1, 1);
END""",
    f"""
CREATE TRIGGER queuestore_rollup_started AFTER UPDATE OF status ON queuestore_tasks
FOR EACH ROW WHEN OLD.status = 'submitted' AND NEW.status = 'working' BEGIN
    {_sqlite_started(_NEW_MINUTE)}
END""",
    f"""
CREATE TRIGGER queuestore_rollup_ended AFTER UPDATE OF status ON queuestore_tasks
FOR EACH ROW WHEN OLD.status IS NOT NEW.status AND NEW.status IN {TERMINAL} BEGIN
    {_sqlite_ended(_NEW_MINUTE)}
END""",
    f"""
CREATE TRIGGER queuestore_rollup_released AFTER UPDATE OF worker_id ON queuestore_tasks
FOR EACH ROW WHEN OLD.status IS NEW.status AND NEW.status = 'working'
    AND OLD.worker_id IS NOT NULL AND NEW.worker_id IS NULL AND NEW.suspends <= OLD.suspends
BEGIN
    {LOG} VALUES ({_NEW_MINUTE}, CASE WHEN json_array_length(NEW.errors)
        > json_array_length(OLD.errors) THEN 'retried' ELSE 'lost' END, NEW.name, '', -1, 1);
END""",
    f"""
CREATE TRIGGER queuestore_rollup_deleted AFTER DELETE ON queuestore_tasks
FOR EACH ROW BEGIN
    {LOG} VALUES (NULL, OLD.status, OLD.name, coalesce(OLD.owner, ''), -1, -1);
END""",
    f"""
CREATE TRIGGER queuestore_rollup_dead AFTER UPDATE OF state ON queuestore_deliveries
FOR EACH ROW WHEN NEW.state = 'dead' AND OLD.state IS NOT 'dead' BEGIN
    {LOG} VALUES (strftime('%Y-%m-%d %H:%M:00.000000', 'now'), 'dead', coalesce(
        (SELECT name FROM queuestore_tasks WHERE id = NEW.task_id), ' '), '', -1, 1);
END""",
]

DROP_SQLITE = [
    f"DROP TRIGGER IF EXISTS queuestore_rollup_{kind}"
    for kind in (
        "dead",
        "deleted",
        "released",
        "ended",
        "started",
        "status",
        "inserted_ended",
        "inserted",
    )
]

# -- the rows there are already -------------------------------------------------

BACKFILL_COUNTS = f"""{LOG}
SELECT NULL, status, name, coalesce(owner, ''), -1, count(*) FROM queuestore_tasks
GROUP BY status, name, owner"""


def _backfill_series(postgres: bool) -> list[str]:
    """The series of the last two days, from the tasks' timestamps, as the triggers count."""
    if postgres:
        minute, since = "date_trunc('minute', {})", "now() - interval '2 days'"
        wait = "queuestore_rollup_bucket(greatest(created_at, coalesce(run_at, created_at)), "
        wait += "started_at)"
        run = "queuestore_rollup_bucket(started_at, finished_at)"
    else:
        minute = "substr({}, 1, 16) || ':00.000000'"
        since = "strftime('%Y-%m-%d %H:%M:%f', 'now', '-2 days')"
        wait = SQLITE_STARTED.replace("NEW.", "")
        run = SQLITE_RAN.replace("NEW.", "")
    created, began, ended = (minute.format(c) for c in ("created_at", "started_at", "finished_at"))
    tasks = "FROM queuestore_tasks WHERE"
    return [
        f"""{LOG} SELECT {created}, 'submitted', name, '', -1, count(*) {tasks}
        created_at >= {since} GROUP BY {created}, name""",
        f"""{LOG} SELECT {began}, 'started', name, '', -1, count(*) {tasks}
        started_at >= {since} GROUP BY {began}, name""",
        f"""{LOG} SELECT {began}, 'wait', name, '', {wait}, count(*) {tasks}
        started_at >= {since} GROUP BY {began}, name, {wait}""",
        f"""{LOG} SELECT {ended}, status, name, '', -1, count(*) {tasks}
        finished_at >= {since} AND status IN {TERMINAL} GROUP BY {ended}, status, name""",
        f"""{LOG} SELECT {ended}, 'run', name, '', {run}, count(*) {tasks}
        finished_at >= {since} AND status IN {TERMINAL} AND started_at IS NOT NULL
        GROUP BY {ended}, name, {run}""",
    ]


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    op.add_column("queuestore_tasks", sa.Column("traceparent", sa.String(55), nullable=True))
    op.create_table(
        "queuestore_rollup_log",
        sa.Column("minute", UTCDateTime(), nullable=True),
        sa.Column("metric", sa.String(20), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("owner", sa.String(256), nullable=False),
        sa.Column("bucket", sa.SmallInteger(), nullable=False),
        sa.Column("delta", sa.Integer(), nullable=False),
    )
    op.create_table(
        "queuestore_rollup_counts",
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("owner", sa.String(256), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("status", "name", "owner", name="pk_queuestore_rollup_counts"),
    )
    op.create_table(
        "queuestore_rollup_series",
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("start", UTCDateTime(), nullable=False),
        sa.Column("metric", sa.String(20), nullable=False),
        sa.Column("bucket", sa.SmallInteger(), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(
            "step", "start", "metric", "bucket", name="pk_queuestore_rollup_series"
        ),
    )
    op.create_table(
        "queuestore_rollup_jobs",
        sa.Column("start", UTCDateTime(), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("metric", sa.String(20), nullable=False),
        sa.Column("bucket", sa.SmallInteger(), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(
            "start", "name", "metric", "bucket", name="pk_queuestore_rollup_jobs"
        ),
    )
    op.create_table(
        "queuestore_workers",
        sa.Column("id", sa.String(300), nullable=False),
        sa.Column("host", sa.String(256), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("node", sa.String(256), nullable=True),
        sa.Column("pool", sa.String(64), nullable=True),
        sa.Column("concurrency", sa.Integer(), nullable=True),
        sa.Column("started_at", UTCDateTime(), nullable=False),
        sa.Column("beat_at", UTCDateTime(), nullable=False),
        sa.Column("running", JsonColumn, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_queuestore_workers"),
    )
    # Straight to the driver: the SQL holds colons (times) that are no parameters.
    run = op.get_bind().exec_driver_sql
    if postgres:
        run(PG_BUCKET)
    for statement in [BACKFILL_COUNTS, *_backfill_series(postgres)]:
        run(statement)
    for statement in POSTGRES[1:] if postgres else SQLITE:
        run(statement)


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for statement in DROP_POSTGRES if postgres else DROP_SQLITE:
        op.execute(statement)
    op.drop_table("queuestore_workers")
    op.drop_table("queuestore_rollup_jobs")
    op.drop_table("queuestore_rollup_series")
    op.drop_table("queuestore_rollup_counts")
    op.drop_table("queuestore_rollup_log")
    op.drop_column("queuestore_tasks", "traceparent")
