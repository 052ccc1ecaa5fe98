"""The statements of the task tree: children spawned, a run parked on them, woken, cancelled.

A child is a task whose ``parent_id`` names the task whose run spawned it;
``spawn_key`` makes it one of its parent's children (a unique index), so a
run that spawns again after a crash or a wake starts nothing twice. What a
child takes from its parent (its owner, and by default its context, TTL and
priority; its deadlines bounded by the parent's) is read from the parent's
row inside the statement, which also fences the spawn to the run holding the
parent.

A run that waits for children *parks* its task: ``waits_on`` holds the ids it
waits for (``[]``: every child), and the task is pending for nobody (the
pending rule leaves parked tasks out). Parking is refused, writing nothing,
when none of those children is live any more. A parked task is *woken*
(``waits_on`` cleared) once none is live: at once by whoever ended the last
child, else by the sweep. Children never come back to life, and a parked task
spawns none, so a wake decided on a statement's snapshot is never wrong.

Cancelling or failing a task cancels its live descendants in one recursive
statement.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Integer,
    Select,
    Text,
    bindparam,
    exists,
    func,
    literal_column,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.sql import ClauseElement

from queuestore.core.models import LIVE, TaskStatus
from queuestore.store.sql import queries
from queuestore.store.sql.queries import COLUMNS, NOTIFY_CHANNEL, STOP_CHANNEL, TABLE, C, Clock
from queuestore.store.sql.schema import NullableJsonColumn, UTCDateTime

CHILD = TABLE.alias("child")
PARENT = TABLE.alias("parent")

ENDED_PARENTS = frozenset({TaskStatus.CANCELLED, TaskStatus.FAILED})
"""A parent in one of these statuses cancels its live children (a completed one does not)."""

_ONE = literal_column("1", Integer())
_EMPTY_LIST: ColumnElement[Any] = literal_column("'[]'")


def _constant(value: str) -> ColumnElement[str]:
    """A status written into the SQL (a constant of this package's: no quote to escape)."""
    return literal_column(f"'{value}'", Text())


def _ids_in(ids: ColumnElement[Any], clock: Clock) -> Select[Any]:
    """The ids a JSON array holds, as a subquery."""
    if clock.database_clock:
        return select(func.jsonb_array_elements_text(ids))
    return select(literal_column("value")).select_from(func.json_each(ids))


def _length(ids: ColumnElement[Any], clock: Clock) -> ColumnElement[int]:
    return func.jsonb_array_length(ids) if clock.database_clock else func.json_array_length(ids)


def _live_waited(
    parent: ColumnElement[Any], ids: ColumnElement[Any], clock: Clock
) -> ColumnElement[bool]:
    """Whether a child of ``parent`` among ``ids`` (a JSON array; ``[]``: any) is live."""
    return exists(
        select(_ONE).where(
            CHILD.c.parent_id == parent,
            CHILD.c.status.in_([_constant(status.value) for status in sorted(LIVE)]),
            or_(_length(ids, clock) == 0, CHILD.c.id.in_(_ids_in(ids, clock))),
        )
    )


SPAWNED = [
    "id",
    "name",
    "input",
    "owner",
    "context_id",
    "ttl_ms",
    "metadata",
    "job",
    "run_at",
    "priority",
    "status",
    "artifacts",
    "answers",
    "errors",
    "created_at",
    "updated_at",
    "attempt",
    "suspends",
    "version",
    "parent_id",
    "spawn_key",
    "depth",
    "start_by",
    "deadline_at",
    "run_timeout_ms",
]


def spawn_child(clock: Clock) -> ClauseElement:
    """Insert one child of ``:parent_id`` if ``:worker`` holds it, working, below ``:max_depth``.

    The child's fields are parameters named as its columns (``:context_id``,
    ``:ttl_ms`` and ``:priority`` NULL for the parent's); its owner is the
    parent's, its depth one more, its ``start_by`` and ``deadline_at`` no later
    than the parent's ``deadline_at``. A key the parent's children already hold
    (or a taken id) inserts nothing. Returns the child's columns.
    """
    stamp = func.clock_timestamp() if clock.database_clock else bindparam("created_at")

    def given(name: str) -> ColumnElement[Any]:
        return bindparam(name, type_=C[name].type)

    values: dict[str, ColumnElement[Any]] = {
        "id": given("id"),
        "name": given("name"),
        "input": given("input"),
        "owner": PARENT.c.owner,
        "context_id": func.coalesce(given("context_id"), PARENT.c.context_id),
        "ttl_ms": func.coalesce(given("ttl_ms"), PARENT.c.ttl_ms),
        "metadata": given("metadata"),
        "job": true(),
        "run_at": given("run_at"),
        "priority": func.coalesce(given("priority"), PARENT.c.priority),
        "status": _constant(TaskStatus.SUBMITTED.value),
        "artifacts": _EMPTY_LIST,
        "answers": _EMPTY_LIST,
        "errors": _EMPTY_LIST,
        "created_at": stamp.cast(UTCDateTime) if clock.database_clock else stamp,
        "updated_at": stamp.cast(UTCDateTime) if clock.database_clock else stamp,
        "attempt": literal_column("0"),
        "suspends": literal_column("0"),
        "version": _ONE,
        "parent_id": PARENT.c.id,
        "spawn_key": given("spawn_key"),
        "depth": PARENT.c.depth + _ONE,
        "start_by": clock.earliest(given("start_by"), PARENT.c.deadline_at),
        "deadline_at": clock.earliest(given("deadline_at"), PARENT.c.deadline_at),
        "run_timeout_ms": given("run_timeout_ms"),
    }
    held = select(*(values[name] for name in SPAWNED)).where(
        PARENT.c.id == bindparam("parent_id"),
        PARENT.c.status == _constant(TaskStatus.WORKING.value),
        PARENT.c.worker_id == bindparam("worker", type_=C.worker_id.type),
        PARENT.c.depth < bindparam("max_depth", type_=Integer()),
    )
    dialect_insert = postgresql.insert if clock.database_clock else sqlite.insert
    inserted = dialect_insert(TABLE).from_select(SPAWNED, held).on_conflict_do_nothing()
    return inserted.returning(*COLUMNS)


def lock_parent() -> ClauseElement:
    """Lock the row of ``:parent_id`` for the transaction, and read it (PostgreSQL)."""
    return select(*COLUMNS).where(C.id == bindparam("parent_id")).with_for_update()


def parent_row() -> ClauseElement:
    """The row of ``:parent_id``, read inside a spawn's transaction (SQLite holds the lock)."""
    return select(*COLUMNS).where(C.id == bindparam("parent_id"))


def children_by_key(clock: Clock) -> ClauseElement:
    """The children of ``:parent_id`` whose keys ``:keys`` (a JSON array) holds."""
    keys = bindparam("keys", type_=JSONB() if clock.database_clock else NullableJsonColumn)
    return select(*COLUMNS).where(
        C.parent_id == bindparam("parent_id"), C.spawn_key.in_(_ids_in(keys, clock))
    )


def park(clock: Clock, returning: Sequence[ColumnElement[Any]] = COLUMNS) -> ClauseElement:
    """End the run ``:fence`` holds on ``:task_id`` to wait for its children ``:waits_on``.

    Like a suspend (no error, ``suspends`` + 1, the task released) but with no
    start time: the task waits until none of those children is live. Refused
    (no row) unless one of them is live now.
    """
    waits_on = bindparam("waits_on", type_=C.waits_on.type)
    now = clock.now()
    return (
        update(TABLE)
        .where(
            C.id == bindparam("task_id"),
            C.status == _constant(TaskStatus.WORKING.value),
            C.worker_id == bindparam("fence", type_=C.worker_id.type),
            _live_waited(C.id, waits_on, clock),
        )
        .values(
            waits_on=waits_on,
            run_at=None,
            status_message=bindparam("message", type_=C.status_message.type),
            suspends=C.suspends + _ONE,
            worker_id=None,
            lease_expires_at=None,
            published_at=None,
            updated_at=now,
            version=C.version + _ONE,
        )
        .returning(*returning)
    )


def _parked() -> list[ColumnElement[bool]]:
    """A parked task, as its partial index spells it."""
    return [
        C.waits_on.is_not(None),
        C.worker_id.is_(None),
        C.status == _constant(TaskStatus.WORKING.value),
    ]


def wake(clock: Clock, *, given: bool) -> ClauseElement:
    """Wake the parked tasks none of whose waited children is live: ``:task_ids`` (a JSON
    array, ``given``) or, for the sweep, up to ``:limit`` of them, longest parked first.

    A woken task is pending and unpublished again, for its job to run.
    """
    parked = [*_parked(), ~_live_waited(C.id, C.waits_on, clock)]
    if given:
        ids = bindparam("task_ids", type_=JSONB() if clock.database_clock else NullableJsonColumn)
        which = C.id.in_(_ids_in(ids, clock))
    else:
        due = select(C.id).where(*parked).order_by(C.updated_at).limit(bindparam("limit"))
        which = C.id.in_(due.scalar_subquery())
    return (
        update(TABLE)
        .where(which, *parked)
        .values(
            waits_on=None,
            status_message=None,
            published_at=None,
            updated_at=clock.now(),
            version=C.version + _ONE,
        )
        .returning(*COLUMNS)
    )


def cancel_descendants(clock: Clock) -> ClauseElement:
    """Cancel the live descendants of ``:task_id`` with ``:reason``, in one statement.

    On PostgreSQL each is announced to workers (a running child stops) and to
    waiters, as a caller's cancel is.
    """
    tree = select(C.id).where(C.parent_id == bindparam("task_id")).cte("tree", recursive=True)
    below = TABLE.alias("below")
    tree = tree.union(select(below.c.id).where(below.c.parent_id == tree.c.id))
    now = clock.now()
    notices = []
    if clock.database_clock:
        change = C.id.concat(_constant(":")).concat(C.status)
        notices = [
            func.pg_notify(_constant(channel), change).label(label)
            for channel, label in ((STOP_CHANNEL, "_stopped"), (NOTIFY_CHANNEL, "_notified"))
        ]
    return (
        update(TABLE)
        .where(
            C.id.in_(select(tree.c.id)),
            queries.statuses_in(LIVE),
        )
        .values(
            status=_constant(TaskStatus.CANCELLED.value),
            status_message=bindparam("reason", type_=C.status_message.type),
            finished_at=now,
            expires_at=clock.expiry(),
            worker_id=None,
            lease_expires_at=None,
            published_at=None,
            updated_at=now,
            version=C.version + _ONE,
        )
        .returning(*COLUMNS, *notices)
    )


def orphans(limit: int) -> Select[Any]:
    """Live children of a cancelled or failed parent (a cascade that did not run), oldest first."""
    return (
        select(*(CHILD.c[str(column.key)].label(str(column.key)) for column in COLUMNS))
        .select_from(CHILD.join(PARENT, PARENT.c.id == CHILD.c.parent_id))
        .where(
            CHILD.c.parent_id.is_not(None),
            CHILD.c.status.in_([_constant(status.value) for status in sorted(LIVE)]),
            PARENT.c.status.in_([_constant(status.value) for status in sorted(ENDED_PARENTS)]),
        )
        .order_by(CHILD.c.created_at)
        .limit(limit)
    )
