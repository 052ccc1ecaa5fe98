"""The statements of named steps: a run records a step fenced by its lease, and reads them back.

A step is a row of ``queuestore_steps`` keyed by ``(task_id, name)``. Recording
one is a single ``INSERT ... SELECT`` whose ``SELECT`` reads the task's row by
its primary key and yields nothing unless the run holds it (``working`` under
its worker id): the lease fences the write as it fences every write of a run,
yet the task's row is not written (no new version, no index entry, no
NOTIFY). A name recorded before makes that insert fail on the primary key;
the same insert with ``ON CONFLICT DO UPDATE`` then replaces a failed step,
never a completed one, so a run that records a completed step again gets
nothing back and reads the step as it stays. The conflict clause is kept off
the common path: a speculative insert costs PostgreSQL about half a plain
insert more.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Any, Final, cast

from sqlalchemy import (
    ColumnElement,
    Select,
    Table,
    Text,
    and_,
    bindparam,
    literal_column,
    select,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql import ClauseElement

from queuestore.core.models import StepStatus, TaskStatus
from queuestore.store.sql import queries
from queuestore.store.sql.queries import C, Clock
from queuestore.store.sql.schema import StepRow

STEPS = cast(Table, StepRow.__table__)
S = STEPS.c

RECORDED: Final[Sequence[ColumnElement[Any]]] = [S.attempt, S.tries, S.started_at, S.finished_at]
"""What :func:`record_step` returns: what the database decides. The rest is what was sent."""

STEP_COLUMNS: Final[Sequence[ColumnElement[Any]]] = [
    C.id.label("task_id"),
    S.name,
    S.kind,
    S.status,
    S.result,
    S.error,
    S.attempt,
    S.tries,
    S.started_at,
    S.finished_at,
]
"""What :func:`task_steps` returns: the task's id, then a step's fields (NULL without one)."""

_FIELDS = [
    "task_id",
    "name",
    "kind",
    "status",
    "result",
    "error",
    "attempt",
    "tries",
    "started_at",
    "finished_at",
]


def _constant(value: StrEnum) -> ColumnElement[str]:
    """A status written into the SQL (a constant of this package's: no quote to escape)."""
    return literal_column(f"'{value.value}'", Text())


def recorded(*, with_result: bool) -> list[ColumnElement[Any]]:
    """The columns :func:`record_step` returns, ``result`` as stored included if asked."""
    return [*RECORDED, *([S.result] if with_result else [])]


def insert_step(clock: Clock, *, with_result: bool) -> ClauseElement:
    """Insert step ``:name`` of ``:task_id`` if ``:worker`` holds the task, working.

    Parameters as :func:`record_step`'s. Returns :func:`recorded`, or no row
    when the run does not hold the task; a name recorded before is a unique
    violation (then :func:`record_step`).
    """
    dialect_insert = postgresql.insert if clock.database_clock else sqlite.insert
    inserted = dialect_insert(STEPS).from_select(_FIELDS, _held(clock))
    return inserted.returning(*recorded(with_result=with_result))


def record_step(clock: Clock, *, with_result: bool) -> ClauseElement:
    """Record step ``:name`` of ``:task_id`` if ``:worker`` holds the task, working.

    Parameters: ``:name``, ``:kind``, ``:status``, ``:result``, ``:error``, and
    the step's start as :meth:`Clock.later` reads ``back`` (minus its elapsed
    time). Returns :func:`recorded`, or no row when the run does not hold the
    task, or the name is a completed step or one of another kind.
    """
    dialect_insert = postgresql.insert if clock.database_clock else sqlite.insert
    inserted = dialect_insert(STEPS).from_select(_FIELDS, _held(clock))
    new = inserted.excluded
    upsert = inserted.on_conflict_do_update(
        index_elements=[S.task_id, S.name],
        set_={
            "status": new.status,
            "result": new.result,
            "error": new.error,
            "attempt": new.attempt,
            "tries": S.tries + literal_column("1"),
            "started_at": new.started_at,
            "finished_at": new.finished_at,
        },
        where=and_(S.status == _constant(StepStatus.FAILED), S.kind == new.kind),
    )
    return upsert.returning(*recorded(with_result=with_result))


def _held(clock: Clock) -> Select[Any]:
    """The new step's row, from the task's row while the run holds it: else no row."""
    return select(
        C.id,
        bindparam("name", type_=S.name.type),
        bindparam("kind", type_=S.kind.type),
        bindparam("status", type_=S.status.type),
        bindparam("result", type_=S.result.type),
        bindparam("error", type_=S.error.type),
        C.attempt,
        literal_column("1"),
        clock.later("back"),
        clock.now(),
    ).where(
        C.id == bindparam("task_id"),
        C.status == _constant(TaskStatus.WORKING),
        C.worker_id == bindparam("worker", type_=C.worker_id.type),
    )


def task_steps(kind: str) -> ClauseElement:
    """The steps of ``:task_id`` if visible in a scope of ``kind``, oldest first.

    One row with NULL step fields for a task without steps; no row for a task
    that is not visible.
    """
    joined = queries.TABLE.outerjoin(STEPS, S.task_id == C.id)
    return (
        select(*STEP_COLUMNS)
        .select_from(joined)
        .where(C.id == bindparam("task_id"), queries.scoped(kind))
        .order_by(S.finished_at, S.name)
    )
