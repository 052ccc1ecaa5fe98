"""The statements of the operator's view on SQL: the rollup's fold and reads, the workers.

Off the hot path of tasks, like :mod:`~queuestore.store.sql.deliveries`: built
per call on the tables of :mod:`queuestore.store.sql.schema`, run on the
connections the store hands them. The rollup's entries are appended by the
triggers of migration 0014, never here; a fold moves them into the counts and
the series in one transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Final, cast

from sqlalchemy import Connection, Table, bindparam, delete, or_, select, text
from sqlalchemy.dialects import postgresql, sqlite

from queuestore.core.models import TaskStatus
from queuestore.core.rollup import QUARTER, CurrentCount, SeriesCount
from queuestore.core.workers import Worker
from queuestore.store.sql.schema import (
    RollupCountRow,
    RollupSeriesRow,
    UTCDateTime,
    WorkerRow,
)

COUNTS = cast(Table, RollupCountRow.__table__)
SERIES = cast(Table, RollupSeriesRow.__table__)
WORKERS = cast(Table, WorkerRow.__table__)
W = WORKERS.c

FOLD_LOCK: Final = (3, 0)
"""The advisory lock (PostgreSQL) a fold holds: one fold at a time, the others skip."""

_QUARTER_SECONDS: Final = int(QUARTER.total_seconds())

FOLD_POSTGRES = text(
    f"""
WITH moved AS (
    DELETE FROM queuestore_rollup_log RETURNING minute, metric, name, owner, bucket, delta
), counted AS (
    INSERT INTO queuestore_rollup_counts AS c (status, name, owner, count)
    SELECT metric, name, owner, sum(delta) FROM moved WHERE minute IS NULL
    GROUP BY metric, name, owner ORDER BY metric, name, owner
    ON CONFLICT (status, name, owner) DO UPDATE SET count = c.count + excluded.count
), stepped AS (
    SELECT steps.step,
        to_timestamp(floor(extract(epoch FROM moved.minute) / steps.step) * steps.step) AS start,
        moved.metric, moved.name, moved.bucket, moved.delta
    FROM moved CROSS JOIN (VALUES (60), ({_QUARTER_SECONDS})) AS steps(step)
    WHERE moved.minute IS NOT NULL
), stepped_in AS (
    INSERT INTO queuestore_rollup_series AS s (step, start, metric, name, bucket, count)
    SELECT step, start, metric, name, bucket, sum(delta) FROM stepped
    GROUP BY step, start, metric, name, bucket ORDER BY step, start, metric, name, bucket
    ON CONFLICT (step, start, metric, name, bucket) DO UPDATE SET count = s.count + excluded.count
)
SELECT count(*) FROM moved
"""
)
"""Move every fresh entry into the counts and both steps of the series, in one statement."""

_QUARTER_OF = (  # the colon escaped: text() would read ":00" as a parameter
    "substr(minute, 1, 14) || printf('%02d', CAST(substr(minute, 15, 2) AS INTEGER) / 15 * 15)"
    " || '\\:00.000000'"
)
FOLD_SQLITE = [
    text(
        """
INSERT INTO queuestore_rollup_counts (status, name, owner, count)
SELECT metric, name, owner, sum(delta) FROM queuestore_rollup_log WHERE minute IS NULL
GROUP BY metric, name, owner
ON CONFLICT (status, name, owner) DO UPDATE SET count = count + excluded.count
"""
    ),
    *(
        text(
            f"""
INSERT INTO queuestore_rollup_series (step, start, metric, name, bucket, count)
SELECT {step}, {start}, metric, name, bucket, sum(delta) FROM queuestore_rollup_log
WHERE minute IS NOT NULL GROUP BY {start}, metric, name, bucket
ON CONFLICT (step, start, metric, name, bucket) DO UPDATE SET count = count + excluded.count
"""
        )
        for step, start in ((60, "minute"), (_QUARTER_SECONDS, _QUARTER_OF))
    ),
]
"""The fold on SQLite, in one transaction with :data:`EMPTY_LOG`: its first write
takes the database's write lock, so no entry comes in between."""

EMPTY_LOG = text("DELETE FROM queuestore_rollup_log")
COUNT_LOG = text("SELECT count(*) FROM queuestore_rollup_log")

CURRENT_COUNTS = text(
    """
SELECT status, name, owner, sum(count) AS count FROM (
    SELECT status, name, owner, count FROM queuestore_rollup_counts
    UNION ALL
    SELECT metric, name, owner, delta FROM queuestore_rollup_log WHERE minute IS NULL
) AS current GROUP BY status, name, owner HAVING sum(count) <> 0
"""
)
"""The counts now: the folded ones and the fresh entries."""

SERIES_SINCE = (
    text(
        """
SELECT start, metric, name, bucket, sum(count) AS count FROM (
    SELECT start, metric, name, bucket, count FROM queuestore_rollup_series
    WHERE step = :step AND start >= :since
    UNION ALL
    SELECT minute, metric, name, bucket, delta FROM queuestore_rollup_log WHERE minute >= :since
) AS series GROUP BY start, metric, name, bucket HAVING sum(count) <> 0
"""
    )
    .bindparams(bindparam("since", type_=UTCDateTime()))
    .columns(start=UTCDateTime())
)
"""The series from ``:since`` in steps of ``:step`` seconds, the fresh entries by minute."""


def fold(connection: Connection, *, postgres: bool) -> int:
    """Fold the fresh entries, in the caller's transaction; 0 if another fold holds the lock."""
    if postgres:
        locked = connection.execute(
            text("SELECT pg_try_advisory_xact_lock(:a, :b)"),
            {"a": FOLD_LOCK[0], "b": FOLD_LOCK[1]},
        ).scalar_one()
        if not locked:
            return 0
        return int(connection.execute(FOLD_POSTGRES).scalar_one())
    moved = int(connection.execute(COUNT_LOG).scalar_one())
    if moved:
        for statement in FOLD_SQLITE:
            connection.execute(statement)
        connection.execute(EMPTY_LOG)
    return moved


def prune(connection: Connection, minutes_before: datetime, quarters_before: datetime) -> None:
    """Drop the old steps of the series and the counts that are zero."""
    s = SERIES.c
    connection.execute(
        delete(SERIES).where(
            or_(
                (s.step == 60) & (s.start < minutes_before),
                (s.step == _QUARTER_SECONDS) & (s.start < quarters_before),
            )
        )
    )
    connection.execute(delete(COUNTS).where(COUNTS.c.count == 0))


def current_counts(connection: Connection) -> list[CurrentCount]:
    """The counts that are not zero, by status, job and owner (None for unowned)."""
    return [
        CurrentCount(TaskStatus(status), name, owner or None, int(count))
        for status, name, owner, count in connection.execute(CURRENT_COUNTS)
    ]


def series(connection: Connection, step: timedelta, since: datetime) -> list[SeriesCount]:
    """The series from ``since`` in steps of ``step`` (the fresh entries by minute)."""
    rows = connection.execute(SERIES_SINCE, {"step": int(step.total_seconds()), "since": since})
    return [
        SeriesCount(start, metric, name, bucket, int(count))
        for start, metric, name, bucket, count in rows
    ]


def beat(connection: Connection, worker: Worker, now: Any, *, postgres: bool) -> None:
    """Insert or update ``worker``'s row, stamped with ``now`` (a clock's value)."""
    values = {
        "id": worker.id,
        "host": worker.host,
        "pid": worker.pid,
        "node": worker.node,
        "pool": worker.pool,
        "concurrency": worker.concurrency,
        "running": worker.running,
        "started_at": now,
        "beat_at": now,
    }
    dialect: Any = postgresql if postgres else sqlite
    statement = dialect.insert(WORKERS).values(values)
    kept = {"started_at", "id"}
    statement = statement.on_conflict_do_update(
        index_elements=[W.id],
        set_={name: statement.excluded[name] for name in values if name not in kept},
    )
    connection.execute(statement)


def workers(connection: Connection) -> list[Worker]:
    """Every worker row."""
    rows = connection.execute(select(WORKERS)).mappings()
    return [Worker.model_validate(dict(row)) for row in rows]


def forget(connection: Connection, worker_id: str | None, beat_before: datetime | None) -> int:
    """Delete a worker's row, or those whose last beat is before ``beat_before``."""
    which: Sequence[Any] = [W.id == worker_id] if worker_id is not None else []
    if beat_before is not None:
        which = [*which, W.beat_at < beat_before]
    return connection.execute(delete(WORKERS).where(or_(*which))).rowcount
