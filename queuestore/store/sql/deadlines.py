"""The statements of deadlines: the reaper's reads of tasks past one, and a held run's release.

Each read walks a partial index of its own (migration 0013): runs past their
``run_deadline_at``, runs that ended from outside (a time-out) and still hold
their slot, tasks never started by their ``start_by``, and live tasks no run
holds past their ``deadline_at``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, bindparam, select, update
from sqlalchemy.sql import ClauseElement

from queuestore.core.models import LIVE, TERMINAL, TaskStatus
from queuestore.store.backend import DeadlineKind
from queuestore.store.sql.queries import COLUMNS, TABLE, C, statuses_in


def past(kind: DeadlineKind, before: ColumnElement[datetime], limit: int) -> Select[Any]:
    """Up to ``limit`` tasks past the deadline ``kind`` names at ``before``, soonest first."""
    if kind == "start_by":
        due, terms = (
            C.start_by,
            [
                C.start_by.is_not(None),
                statuses_in(frozenset({TaskStatus.SUBMITTED})),
                C.started_at.is_(None),
                C.worker_id.is_(None),
            ],
        )
    elif kind == "deadline":
        due, terms = (
            C.deadline_at,
            [
                C.deadline_at.is_not(None),
                statuses_in(LIVE),
                C.worker_id.is_(None),
            ],
        )
    else:
        statuses = TERMINAL if kind == "held" else frozenset({TaskStatus.WORKING})
        due, terms = (
            C.run_deadline_at,
            [
                C.run_deadline_at.is_not(None),
                C.worker_id.is_not(None),
                statuses_in(statuses),
            ],
        )
    return select(*COLUMNS).where(*terms, due <= before).order_by(due).limit(limit)


def release_held() -> ClauseElement:
    """Free the slot ``:worker`` holds on the ended ``:task_id`` (no new version)."""
    return (
        update(TABLE)
        .where(
            C.id == bindparam("task_id"),
            C.worker_id == bindparam("worker", type_=C.worker_id.type),
            statuses_in(TERMINAL),
        )
        .values(worker_id=None)
        .returning(C.id)
    )
