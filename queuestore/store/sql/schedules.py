"""The statements of schedules on SQL: insert, read, the compare-and-set write, delete.

Off the hot path of tasks, like :mod:`~queuestore.store.sql.operator`: built per
call on :class:`~queuestore.store.sql.schema.ScheduleRow`'s table, run on the
connections the store hands them. A write compares the schedule's version and
sets it one higher in one ``UPDATE``; on PostgreSQL a second writer waits for
the first to commit and then finds the version moved on, on SQLite writes are
serialised: either way one of two racing beats writes a tick, and the other
writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import ColumnElement, Connection, Table, delete, select, update
from sqlalchemy.dialects import postgresql, sqlite

from queuestore.core.owner import OwnerScope
from queuestore.core.schedules import Schedule
from queuestore.store.sql.schema import ScheduleRow

SCHEDULES = cast(Table, ScheduleRow.__table__)
S = SCHEDULES.c


def _row(values: Mapping[str, Any]) -> dict[str, Any]:
    """A schedule's fields as its row's columns (``every`` in milliseconds)."""
    row = {key: value for key, value in values.items() if key not in ("every", "last_status")}
    if "every" in values:
        every = values["every"]
        row["every_ms"] = None if every is None else every // timedelta(milliseconds=1)
    if "catch_up" in row:
        row["catch_up"] = str(row["catch_up"])
    return row


def _schedule(row: Mapping[Any, Any]) -> Schedule:
    values = dict(row)
    every_ms = values.pop("every_ms")
    values["every"] = None if every_ms is None else timedelta(milliseconds=every_ms)
    return Schedule.model_validate(values)


def _visible(scope: OwnerScope) -> list[ColumnElement[bool]]:
    if scope.unscoped:
        return []
    if scope.owner is None:
        return [S.owner.is_(None)]
    return [S.owner == scope.owner]


def insert_schedule(connection: Connection, schedule: Schedule, *, postgres: bool) -> bool:
    """Insert ``schedule``; False when its id is taken."""
    dialect: Any = postgresql if postgres else sqlite
    statement = (
        dialect.insert(SCHEDULES)
        .values(_row(schedule.model_dump()))
        .on_conflict_do_nothing(index_elements=[S.id])
        .returning(S.id)
    )
    return connection.execute(statement).first() is not None


def fetch(connection: Connection, schedule_id: str, scope: OwnerScope) -> Schedule | None:
    """The schedule, if visible in ``scope``."""
    statement = select(SCHEDULES).where(S.id == schedule_id, *_visible(scope))
    row = connection.execute(statement).mappings().first()
    return None if row is None else _schedule(row)


def listed(connection: Connection, scope: OwnerScope, limit: int) -> list[Schedule]:
    """Up to ``limit`` schedules visible in ``scope``, oldest first."""
    statement = select(SCHEDULES).where(*_visible(scope)).order_by(S.created_at, S.id).limit(limit)
    return [_schedule(row) for row in connection.execute(statement).mappings()]


def due(connection: Connection, now: datetime, limit: int) -> list[Schedule]:
    """Up to ``limit`` schedules not paused whose next tick is at or before ``now``."""
    statement = (
        select(SCHEDULES)
        .where(S.paused.is_(False), S.next_run_at.is_not(None), S.next_run_at <= now)
        .order_by(S.next_run_at)
        .limit(limit)
    )
    return [_schedule(row) for row in connection.execute(statement).mappings()]


def write(
    connection: Connection,
    schedule_id: str,
    version: int,
    values: Mapping[str, Any],
    now: ColumnElement[datetime],
) -> Schedule | None:
    """Set ``values`` if the schedule is at ``version``; the schedule as written, or None."""
    statement = (
        update(SCHEDULES)
        .where(S.id == schedule_id, S.version == version)
        .values(_row(values) | {"updated_at": now, "version": S.version + 1})
        .returning(*SCHEDULES.c)
    )
    row = connection.execute(statement).mappings().first()
    return None if row is None else _schedule(row)


def remove(connection: Connection, schedule_id: str, scope: OwnerScope) -> None:
    """Delete the schedule if visible in ``scope``."""
    connection.execute(delete(SCHEDULES).where(S.id == schedule_id, *_visible(scope)))
