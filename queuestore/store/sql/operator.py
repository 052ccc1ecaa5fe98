"""The statements of the operator's view on SQL: the rollup's fold and reads, the workers.

Off the hot path of tasks, like :mod:`~queuestore.store.sql.deliveries`: built
per call on the tables of :mod:`queuestore.store.sql.schema`, run on the
connections the store hands them. The rollup's entries are appended by the
triggers of migration 0012, never here; a fold moves them into the counts and
the series in one transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final, cast

from sqlalchemy import (
    Connection,
    Table,
    TextClause,
    bindparam,
    delete,
    or_,
    select,
    text,
)
from sqlalchemy.dialects import postgresql, sqlite

from queuestore.core.models import TaskStatus
from queuestore.core.rollup import ALL_JOBS, BACKLOG, CurrentCount, SeriesCount
from queuestore.core.workers import Worker
from queuestore.store.sql.schema import (
    RollupCountRow,
    RollupJobRow,
    RollupSeriesRow,
    UTCDateTime,
    WorkerRow,
)

COUNTS = cast(Table, RollupCountRow.__table__)
SERIES = cast(Table, RollupSeriesRow.__table__)
JOBS = cast(Table, RollupJobRow.__table__)
WORKERS = cast(Table, WorkerRow.__table__)
W = WORKERS.c

FOLD_LOCK: Final = (3, 0)
"""The advisory lock (PostgreSQL) a fold holds: one fold at a time, the others skip."""

STEPS: Final = ((60, False), (300, True), (900, False), (3600, True))
"""The steps of every job's series a fold writes: ``(step seconds, timed)``. Counts per
minute and quarter hour, histograms (timed) per five minutes and hour."""

SHORT_STEPS: Final = (60, 300)
"""The steps pruned after ``SHORT_KEPT``, the others after ``KEPT``."""

_STEP_ROWS = ", ".join(f"({step}, {str(timed).lower()})" for step, timed in STEPS)

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
        moved.metric, moved.bucket, moved.delta
    FROM moved CROSS JOIN (VALUES {_STEP_ROWS}) AS steps(step, timed)
    WHERE moved.minute IS NOT NULL AND steps.timed = (moved.bucket >= 0)
), stepped_in AS (
    INSERT INTO queuestore_rollup_series AS s (step, start, metric, bucket, count)
    SELECT step, start, metric, bucket, sum(delta) FROM stepped
    GROUP BY step, start, metric, bucket ORDER BY step, start, metric, bucket
    ON CONFLICT (step, start, metric, bucket) DO UPDATE SET count = s.count + excluded.count
), jobs_in AS (
    INSERT INTO queuestore_rollup_jobs AS j (start, name, metric, bucket, count)
    SELECT date_trunc('hour', minute), name, metric, bucket, sum(delta) FROM moved
    WHERE minute IS NOT NULL
    GROUP BY 1, name, metric, bucket ORDER BY 1, name, metric, bucket
    ON CONFLICT (start, name, metric, bucket) DO UPDATE SET count = j.count + excluded.count
)
SELECT count(*) FROM moved
"""
)
"""Move every fresh entry into the counts, every job's series (:data:`STEPS`) and each
job's per hour, in one statement."""


def _sqlite_floor(step: int | str) -> str:
    """A stored minute floored to its step of ``step`` seconds, stored the same way."""
    return (
        f"strftime('%Y-%m-%d %H:%M:%S.000000', "
        f"CAST(strftime('%s', minute) AS INTEGER) / {step} * {step}, 'unixepoch')"
    )


def _sqlite_fold(step: int, timed: bool) -> TextClause:
    start = _sqlite_floor(step)
    return text(
        f"""
INSERT INTO queuestore_rollup_series (step, start, metric, bucket, count)
SELECT {step}, {start}, metric, bucket, sum(delta) FROM queuestore_rollup_log
WHERE minute IS NOT NULL AND bucket {">=" if timed else "<"} 0 GROUP BY {start}, metric, bucket
ON CONFLICT (step, start, metric, bucket) DO UPDATE SET count = count + excluded.count
"""
    )


_HOUR = _sqlite_floor(3600)

FOLD_SQLITE = [
    text(
        """
INSERT INTO queuestore_rollup_counts (status, name, owner, count)
SELECT metric, name, owner, sum(delta) FROM queuestore_rollup_log WHERE minute IS NULL
GROUP BY metric, name, owner
ON CONFLICT (status, name, owner) DO UPDATE SET count = count + excluded.count
"""
    ),
    *(_sqlite_fold(*step) for step in STEPS),
    text(
        f"""
INSERT INTO queuestore_rollup_jobs (start, name, metric, bucket, count)
SELECT {_HOUR}, name, metric, bucket, sum(delta) FROM queuestore_rollup_log
WHERE minute IS NOT NULL GROUP BY {_HOUR}, name, metric, bucket
ON CONFLICT (start, name, metric, bucket) DO UPDATE SET count = count + excluded.count
"""
    ),
]
"""The fold on SQLite, in one transaction with :data:`EMPTY_LOG`: its first write
takes the database's write lock, so no entry comes in between."""

_NOW_STEP = {
    "postgresql": "to_timestamp(floor(extract(epoch FROM now()) / step) * step)",
    "sqlite": "strftime('%Y-%m-%d %H:%M:%S.000000', "
    "CAST(strftime('%s', 'now') AS INTEGER) / step * step, 'unixepoch')",
}


def sample_backlog(dialect: str) -> TextClause:
    """Record the tasks waiting to start now as the ``backlog`` of the current minute and
    quarter hour (the last sample of a step wins)."""
    return text(
        f"""
INSERT INTO queuestore_rollup_series AS s (step, start, metric, bucket, count)
SELECT step, {_NOW_STEP[dialect]}, '{BACKLOG}', -1, (
    SELECT coalesce(sum(count), 0) FROM queuestore_rollup_counts WHERE status = 'submitted'
) FROM (SELECT 60 AS step UNION ALL SELECT 900) AS steps WHERE true
ON CONFLICT (step, start, metric, bucket) DO UPDATE SET count = excluded.count
"""
    )


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

_EPOCH = {
    "postgresql": "CAST(extract(epoch FROM {}) AS bigint)",
    "sqlite": "CAST(strftime('%s', {}) AS INTEGER)",
}
"""A stored time as whole seconds since the epoch: cheaper to read than a timestamp."""


def series_since(dialect: str, *, timed: bool) -> TextClause:
    """Every job's counts (or, ``timed``, histograms) together from ``:since`` in steps of
    ``:step`` seconds (the fresh entries floored to their steps), each step's start in
    seconds since the epoch."""
    which = f"bucket {'>=' if timed else '<'} 0"
    epoch = _EPOCH[dialect]
    return text(
        f"""
SELECT start, metric, bucket, sum(count) AS count FROM (
    SELECT {epoch.format("start")} AS start, metric, bucket, count
    FROM queuestore_rollup_series
    WHERE step = :step AND start >= :since AND {which}
    UNION ALL
    SELECT {epoch.format("minute")} / :step * :step, metric, bucket, delta
    FROM queuestore_rollup_log WHERE minute >= :since AND {which}
) AS series GROUP BY start, metric, bucket HAVING sum(count) <> 0 OR metric = '{BACKLOG}'
"""
    ).bindparams(bindparam("since", type_=UTCDateTime()))


JOBS_SINCE = text(
    """
SELECT name, metric, bucket, sum(count) AS count FROM (
    SELECT name, metric, bucket, count FROM queuestore_rollup_jobs WHERE start >= :since
    UNION ALL
    SELECT name, metric, bucket, delta FROM queuestore_rollup_log WHERE minute >= :since
) AS jobs GROUP BY name, metric, bucket HAVING sum(count) <> 0
"""
).bindparams(bindparam("since", type_=UTCDateTime()))
"""Each job's series summed from the hour ``:since`` on."""


def fold(connection: Connection, *, postgres: bool) -> int:
    """Fold the fresh entries, in the caller's transaction; 0 if another fold holds the lock."""
    if postgres:
        locked = connection.execute(
            text("SELECT pg_try_advisory_xact_lock(:a, :b)"),
            {"a": FOLD_LOCK[0], "b": FOLD_LOCK[1]},
        ).scalar_one()
        if not locked:
            return 0
        moved = int(connection.execute(FOLD_POSTGRES).scalar_one())
    else:
        moved = int(connection.execute(COUNT_LOG).scalar_one())
        if moved:
            for statement in FOLD_SQLITE:
                connection.execute(statement)
            connection.execute(EMPTY_LOG)
    connection.execute(sample_backlog(connection.dialect.name))
    return moved


def prune(connection: Connection, short_before: datetime, long_before: datetime) -> None:
    """Drop the old steps of the series (:data:`SHORT_STEPS` sooner) and the zero counts."""
    s = SERIES.c
    connection.execute(
        delete(SERIES).where(
            or_(
                s.step.in_(SHORT_STEPS) & (s.start < short_before),
                s.step.not_in(SHORT_STEPS) & (s.start < long_before),
            )
        )
    )
    connection.execute(delete(JOBS).where(JOBS.c.start < long_before))
    connection.execute(delete(COUNTS).where(COUNTS.c.count == 0))


def current_counts(connection: Connection) -> list[CurrentCount]:
    """The counts that are not zero, by status, job and owner (None for unowned)."""
    return [
        CurrentCount(TaskStatus(status), name, owner or None, int(count))
        for status, name, owner, count in connection.execute(CURRENT_COUNTS)
    ]


def series(
    connection: Connection, step: timedelta, since: datetime, *, timed: bool
) -> list[SeriesCount]:
    """Every job's counts (or histograms) together from ``since`` in steps of ``step``."""
    statement = series_since(connection.dialect.name, timed=timed)
    rows = connection.execute(statement, {"step": int(step.total_seconds()), "since": since})
    return [
        SeriesCount(datetime.fromtimestamp(start, UTC), metric, ALL_JOBS, bucket, int(count))
        for start, metric, bucket, count in rows.all()
    ]


def jobs(connection: Connection, since: datetime) -> list[SeriesCount]:
    """Each job's series summed from the hour ``since`` on (as one count at ``since``)."""
    rows = connection.execute(JOBS_SINCE, {"since": since})
    return [
        SeriesCount(since, metric, name, bucket, int(count))
        for name, metric, bucket, count in rows.all()
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
