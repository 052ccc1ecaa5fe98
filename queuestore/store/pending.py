"""The pending rule: which tasks wait for a run, and which of those for their message.

A task is *pending* while it is ``submitted``, or ``working`` with no run
holding it (a job's retry, a resumed task, a reaped run, a sleep), and not
parked on its child tasks (``waits_on``): a run may claim it.
A pending job (not a record an agent keeps in its own process) is
*unpublished* until its message goes out (``published_at``). This module is
the one definition, read three ways: as a Python predicate (the in-memory
store, the run side), as the statuses the SQL store's statements test
(:mod:`queuestore.store.sql.queries`), and as the SQL text of the sweep's
partial indexes (:mod:`queuestore.store.sql.schema`). A test checks that the
three agree.
"""

from __future__ import annotations

from typing import Final, Literal

from queuestore.core.models import Task, TaskStatus

PENDING_STATUSES: Final = frozenset({TaskStatus.SUBMITTED, TaskStatus.WORKING})
"""The statuses a run may claim a task in."""

PENDING_SQL: Final = "worker_id IS NULL AND waits_on IS NULL AND status IN ({})".format(
    ", ".join(f"'{status.value}'" for status in sorted(PENDING_STATUSES))
)
"""The pending rule in SQL, as the sweep's partial indexes spell it (SQLite matches an
index's terms literally, so the statements' terms must read the same)."""


def is_pending(task: Task) -> bool:
    """Whether a run may claim ``task``: pending statuses, no run holds it, and it is not
    parked until its child tasks end."""
    return task.status in PENDING_STATUSES and task.worker_id is None and task.waits_on is None


def unpublished_sql(
    dialect: Literal["postgresql", "sqlite"], *, published: bool, scheduled: bool | None = None
) -> str:
    """The predicate of a sweep index: pending jobs, published or not.

    A row that is not a job is in no such index. ``scheduled`` narrows an index
    of unpublished jobs to those with a start time (True) or without (False).
    """
    job = "job = 1" if dialect == "sqlite" else "job"
    test = "IS NOT NULL" if published else "IS NULL"
    predicate = f"{job} AND published_at {test} AND {PENDING_SQL}"
    if scheduled is None:
        return predicate
    return f"{predicate} AND run_at {'IS NOT NULL' if scheduled else 'IS NULL'}"
