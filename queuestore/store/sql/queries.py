"""The statement catalogue: every SQL statement of the store, each named once here.

One function (or constant) per statement, each with what it does, for SQLite
and PostgreSQL alike where they share it. :class:`~queuestore.store.sql.store.SqlTaskStore`
says which to run with which parameters; :mod:`~queuestore.store.sql.executor`
compiles and runs them; :mod:`~queuestore.store.sql.codec` decodes their rows.

The table and what a statement returns: :data:`TABLE`, :data:`COLUMNS`,
:data:`INSERTED`, :data:`TASK_OBJECT`, :data:`PAGE_JSON`.

The statements:

- :func:`insert_task`: a new task, in ``submitted``; :func:`insert_tasks`, many.
- :func:`fetch_task`: one task by id, within an owner scope.
- :func:`key_holder`: the live task that holds a unique key.
- :func:`write_task`: every status write and change of a live task, one
  compare-and-set ``UPDATE ... RETURNING``; its shape is a :class:`WriteShape`.
- :func:`extend_lease`: a heartbeat's renewal of a run's lease.
- :func:`delete_task`: one task by id, within an owner scope.
- :func:`page_tasks`, :func:`page_tasks_json`: a page of a listing, newest first.
- :func:`count_tasks`: how many tasks a listing's filters match.
- :func:`changed_since`: the change feed's read of what changed since a time.
- :data:`WATCH_TASKS`: marks tasks as watched, so that their writes are announced.
- :func:`delete_expired_postgres`, :func:`delete_expired`: the janitor's batch.
- :func:`expired_leases`: the reaper's runs whose lease ran out.
- :func:`unpublished`, :func:`scheduled`: the sweep's tasks whose job was
  not published (or, scheduled, is about to start).
- :func:`mark_published`: the publish marks of published jobs.
- :func:`count_unpublished`, :data:`COUNT_BY_STATUS`: the metrics' counts.
- :func:`oldest_waiting`: the overview's submitted task that waited longest.
- :data:`CLOCK`: the database's clock.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, NamedTuple, cast

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Integer,
    Interval,
    Table,
    Text,
    and_,
    bindparam,
    case,
    delete,
    func,
    insert,
    literal,
    literal_column,
    null,
    or_,
    select,
    text,
    tuple_,
    update,
)
from sqlalchemy import (
    column as sql_column,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.dialects.postgresql import JSONB, aggregate_order_by
from sqlalchemy.sql import ClauseElement, Delete, Select, TextClause, Update

from queuestore.core.concurrency import ConcurrencyLimits
from queuestore.core.flow import FlowControl
from queuestore.core.models import LIVE, TERMINAL, TaskStatus
from queuestore.core.owner import OwnerScope
from queuestore.store.backend import UNSET, ListQuery, SweepFilter, Write
from queuestore.store.pending import PENDING_STATUSES
from queuestore.store.sql import flow
from queuestore.store.sql.schema import TaskRow, UTCDateTime, WatchRow

if TYPE_CHECKING:
    pass

TABLE = cast(Table, TaskRow.__table__)
C = TABLE.c
WATCHES = cast(Table, WatchRow.__table__)
COLUMNS: Sequence[ColumnElement[Any]] = [
    C.id,
    C.name,
    C.input,
    C.owner,
    C.context_id,
    C.status,
    C.status_message,
    C.progress,
    C.result,
    C.error,
    C.artifacts,
    C["metadata"],
    C.answers,
    C.created_at,
    C.updated_at,
    C.started_at,
    C.finished_at,
    C.ttl_ms,
    C.attempt,
    C.version,
    C.worker_id,
    C.lease_expires_at,
    C.run_at,
    C.unique_key,
    C.priority,
    C.errors,
    C.suspends,
    C.traceparent,
    C.parent_id,
    C.spawn_key,
    C.depth,
    C.waits_on,
    C.start_by,
    C.deadline_at,
    C.run_timeout_ms,
    C.run_deadline_at,
]
"""What every statement returns: the fields of a :class:`~queuestore.core.models.Task`."""

IN_MILLISECONDS: Final = {"ttl_ms": "ttl", "run_timeout_ms": "run_timeout"}
"""The columns that hold a ``Task``'s duration in milliseconds, and the field each is."""

NOTIFY_CHANNEL = "queuestore_tasks"
"""PostgreSQL channel announcing changes as ``<task id>:<status>``.

Every write to a terminal or parked status is announced; any other write only
while its task is watched (a live row in ``queuestore_watches``).
"""

STOP_CHANNEL = "queuestore_stops"
"""PostgreSQL channel for workers: ``<task id>:<status>`` of runs ended by a caller (a cancel).

Workers listen here rather than on :data:`NOTIFY_CHANNEL`, so that no worker
wakes for another's completions.
"""


@dataclass(frozen=True, slots=True)
class Clock:
    """Timestamps from the database's clock (PostgreSQL) or the process's (SQLite)."""

    database_clock: bool

    def now(self) -> ColumnElement[datetime]:
        """The current time, in a statement."""
        if self.database_clock:
            return func.now()
        return bindparam("now", type_=UTCDateTime)

    def later(self, name: str) -> ColumnElement[datetime]:
        """The current time plus the interval given as the parameter ``name``."""
        if self.database_clock:
            return func.now() + bindparam(name, type_=Interval())
        return bindparam(f"{name}_at", type_=UTCDateTime)

    def params(self, **intervals: timedelta) -> dict[str, Any]:
        """The parameters :meth:`now` and :meth:`later` need (none but intervals on PostgreSQL)."""
        if self.database_clock:
            return dict(intervals)
        now = datetime.now(UTC)
        return {"now": now} | {f"{name}_at": now + delta for name, delta in intervals.items()}

    def at(self, now: datetime | None = None) -> ColumnElement[datetime]:
        """``now`` as a value in a statement; without it, the clock's current time
        (the database's, where it has one), bound when the statement is built."""
        if now is None and self.database_clock:
            return func.now().cast(UTCDateTime)
        return literal(now or datetime.now(UTC), UTCDateTime)

    def earlier(self, clock: ColumnElement[datetime], delta: timedelta) -> ColumnElement[datetime]:
        """``delta`` before ``clock`` (a value of :meth:`at`)."""
        if self.database_clock:
            return (clock - literal(delta, Interval())).cast(UTCDateTime)
        value = getattr(clock, "value", None)
        if not isinstance(value, datetime):
            raise TypeError("only a literal clock can be shifted in Python")
        return literal(value - delta, UTCDateTime)

    def apart(
        self, later: ColumnElement[datetime], earlier: ColumnElement[datetime], delta: timedelta
    ) -> ColumnElement[bool]:
        """Whether ``later`` is more than ``delta`` after ``earlier`` (two columns)."""
        if self.database_clock:
            return later > earlier + literal(delta, Interval())
        seconds = (func.julianday(later) - func.julianday(earlier)) * 86400.0
        return seconds > delta.total_seconds()

    def expiry(self) -> ColumnElement[Any]:
        """``now + ttl`` for the row being written, NULL when it has no ttl."""
        return case((C.ttl_ms.is_not(None), self.after_ms(C.ttl_ms)), else_=None)

    def after_ms(self, milliseconds: ColumnElement[Any]) -> ColumnElement[Any]:
        """The clock plus ``milliseconds`` (an expression; NULL gives NULL)."""
        seconds = milliseconds / 1000.0
        now = self.now()
        if self.database_clock:
            return now + func.make_interval(0, 0, 0, 0, 0, 0, seconds)
        # SQLite date arithmetic rounds to the millisecond: shift the clock cut
        # to its millisecond (exact), then put its last three digits back.
        shift = func.printf("%.3f seconds", seconds)
        to_millisecond = func.substr(now, 1, 23)
        later = func.strftime("%Y-%m-%d %H:%M:%f", to_millisecond, shift).concat(
            func.substr(now, 24, 3)
        )
        return case((milliseconds.is_not(None), later), else_=None)  # printf takes NULL for 0

    def earliest(self, first: ColumnElement[Any], second: ColumnElement[Any]) -> ColumnElement[Any]:
        """The earlier of two times, either NULL (PostgreSQL's ``least`` skips NULLs;
        SQLite's ``min`` is NULL if either is)."""
        if self.database_clock:
            return func.least(first, second)
        return case(
            (first.is_(None), second),
            (or_(second.is_(None), first < second), first),
            else_=second,
        )


def scope_kind(scope: OwnerScope) -> str:
    """How an owner scope filters: ``any``, ``nobody``, ``unowned`` or ``owner``."""
    if scope.unscoped:
        return "any"
    if scope.nobody:
        return "nobody"
    return "unowned" if scope.owner is None else "owner"


def scoped(kind: str) -> ColumnElement[bool]:
    """The owner filter as a predicate inside the query (``:owner`` for a principal)."""
    if kind == "any":
        return literal_column("1") == literal_column("1")
    if kind == "nobody":
        return literal_column("1") == literal_column("0")
    if kind == "unowned":
        return C.owner.is_(None)
    return C.owner == bindparam("owner", type_=C.owner.type)


def _sql_text(value: str) -> ColumnElement[str]:
    """A constant text in the SQL (one of this module's own: no quote to escape).

    Raises:
        ValueError: ``value`` holds a quote, which this helper does not escape.
    """
    if "'" in value:
        raise ValueError(f"a constant text of the SQL holds a quote: {value!r}")
    return literal_column(f"'{value}'", Text())


def statuses_in(statuses: frozenset[TaskStatus]) -> ColumnElement[bool]:
    """``status IN (...)`` with the statuses written into the SQL (they are constants)."""
    return C.status.in_([_sql_text(status.value) for status in sorted(statuses)])


INSERTED: Sequence[ColumnElement[Any]] = [C.created_at, C.input, C["metadata"]]
"""What :func:`insert_task` returns: the clock's stamp, and the documents as stored.

The rest of the new row is what the parameters say. The documents come back
because the database may rewrite them (PostgreSQL's ``jsonb`` reorders keys and
writes ``1e300`` as an integer). Building the whole row as one JSON object, as
the other statements return it, costs the server more than these three.
"""


_ONE: ColumnElement[int] = literal_column("1", Integer())
_EMPTY_LIST: ColumnElement[Any] = literal_column("'[]'")
"""Constants written into the SQL, not sent as parameters: the driver dumps every
parameter on every call, and a JSON one through the engine's serializer."""


NEW_FIELDS: Final = (
    *("id", "name", "input", "owner", "context_id", "ttl_ms", "metadata", "job", "run_at"),
    "unique_key",
    "priority",
    "traceparent",
    *("start_by", "deadline_at", "run_timeout_ms"),
)
"""The columns a new task's parameters give; the rest are constants or the clock."""


def insert_task(clock: Clock) -> ClauseElement:
    """Insert a task in ``submitted``; parameters are the new task's fields.

    Returns the columns :data:`INSERTED` names.
    """
    return insert(TABLE).values(_new_row(clock.now())).returning(*INSERTED)


def insert_tasks(clock: Clock, *, documents: bool = True) -> ClauseElement:
    """Insert tasks in ``submitted``, skipping a row a unique index refuses (a taken id,
    a held unique key): returns ``id`` and :data:`INSERTED` of the rows inserted
    (without the documents, ``documents=False``, when they come back as sent).

    On PostgreSQL it is one statement whatever the count: the parameter
    ``rows`` is a JSON array of the tasks' :data:`NEW_FIELDS`, read by
    ``jsonb_to_recordset``. On SQLite it is executed with one parameter set per
    task, which SQLAlchemy sends as multi-row ``INSERT ... VALUES`` statements
    ("insertmanyvalues"). Each row's timestamp is its own (PostgreSQL's
    ``clock_timestamp()``, once per row; the parameter ``created_at`` on
    SQLite), so a listing keeps the tasks in the order given.
    """
    returned = INSERTED if documents else INSERTED[:1]
    if not clock.database_clock:
        stamped = _new_row(bindparam("created_at", type_=UTCDateTime))
        rows = sqlite.insert(TABLE).values(stamped).on_conflict_do_nothing()
        return rows.returning(C.id, *returned)
    records = (
        func.jsonb_to_recordset(bindparam("rows", type_=JSONB()))
        .table_valued(*[sql_column(name, C[name].type) for name in NEW_FIELDS], name="new")
        .render_derived(with_types=True)
    )
    # A volatile function in a subquery's list is evaluated once per row there.
    new = select(*records.c, func.clock_timestamp().cast(UTCDateTime).label("stamp")).subquery(
        "new_rows"
    )
    fixed = _new_row(new.c.stamp)
    names = [*NEW_FIELDS, *(name for name in fixed if name not in NEW_FIELDS)]
    chosen = select(*(new.c[name] if name in NEW_FIELDS else fixed[name] for name in names))
    inserted = postgresql.insert(TABLE).from_select(names, chosen).on_conflict_do_nothing()
    return inserted.returning(C.id, *returned)


def _new_row(now: ColumnElement[datetime]) -> dict[str, Any]:
    """The values of a new task's row: its fields as parameters, the rest as constants."""
    values: dict[str, Any] = {name: bindparam(name, type_=C[name].type) for name in NEW_FIELDS}
    values |= {
        "status": _sql_text(TaskStatus.SUBMITTED.value),
        "artifacts": _EMPTY_LIST,
        "answers": _EMPTY_LIST,
        "errors": _EMPTY_LIST,
        "created_at": now,
        "updated_at": now,
        "attempt": literal_column("0"),
        "suspends": literal_column("0"),
        "version": literal_column("1"),
    }
    return values


def key_holder(owned: bool, returning: Sequence[ColumnElement[Any]] = COLUMNS) -> ClauseElement:
    """The live task holding ``:unique_key``, of ``:owner`` (``owned``) or unowned, as
    ``returning``; served by the unique index that keeps it the only one."""
    owner = C.owner == bindparam("owner", type_=C.owner.type) if owned else C.owner.is_(None)
    return select(*returning).where(
        owner,
        C.unique_key == bindparam("unique_key", type_=C.unique_key.type),
        statuses_in(LIVE),
    )


def delete_task(kind: str) -> ClauseElement:
    """Delete ``:task_id`` if visible in a scope of ``kind``; returns the id deleted."""
    return delete(TABLE).where(C.id == bindparam("task_id"), scoped(kind)).returning(C.id)


def fetch_task(kind: str, returning: Sequence[ColumnElement[Any]] = COLUMNS) -> ClauseElement:
    """The task with id ``:task_id`` if visible in a scope of ``kind``, as ``returning``."""
    return select(*returning).where(C.id == bindparam("task_id"), scoped(kind))


@dataclass(frozen=True, slots=True)
class PageShape:
    """Which filters a listing uses; each combination compiles once."""

    scope: str
    statuses: frozenset[TaskStatus] | None
    context_id: bool
    name: bool
    updated_after: bool
    after: bool
    created_after: bool = False
    created_before: bool = False
    parent: str = "any"
    """``any`` task, ``root`` tasks only, or the ``child`` tasks of ``:parent_id``."""


def _listed(shape: PageShape) -> list[ColumnElement[bool]]:
    """The filters of a listing, as conditions on the row."""
    conditions = [scoped(shape.scope)]
    if shape.statuses is not None:
        conditions.append(statuses_in(shape.statuses))
    if shape.context_id:
        conditions.append(C.context_id == bindparam("context_id", type_=C.context_id.type))
    if shape.name:
        conditions.append(C.name == bindparam("name", type_=C.name.type))
    if shape.updated_after:
        conditions.append(C.updated_at > bindparam("updated_after", type_=UTCDateTime))
    if shape.created_after:
        conditions.append(C.created_at > bindparam("created_after", type_=UTCDateTime))
    if shape.created_before:
        conditions.append(C.created_at < bindparam("created_before", type_=UTCDateTime))
    conditions += _in_tree(shape.parent)
    return conditions


def _in_tree(parent: str) -> list[ColumnElement[bool]]:
    """A listing's place in the tree: the children of ``:parent_id``, or the roots."""
    if parent == "child":
        return [C.parent_id == bindparam("parent_id", type_=C.parent_id.type)]
    if parent == "root":
        return [C.parent_id.is_(None)]
    return []


COUNT = literal_column("count", Integer())
"""The one column of :func:`count_tasks`."""


def count_tasks(shape: PageShape) -> ClauseElement:
    """How many tasks a listing's filters admit, on the indexes the listing uses."""
    return select(func.count().label("count")).select_from(TABLE).where(*_listed(shape))


def page_tasks(shape: PageShape) -> ClauseElement:
    """Up to ``:limit`` tasks, newest first by ``(created_at, id)``, after the cursor's key."""
    conditions = _listed(shape)
    if shape.after:
        position = tuple_(
            bindparam("after_created_at", type_=UTCDateTime),
            bindparam("after_id", type_=C.id.type),
        )
        conditions.append(tuple_(C.created_at, C.id) < position)
    return (
        select(*COLUMNS)
        .where(*conditions)
        .order_by(C.created_at.desc(), C.id.desc())
        .limit(bindparam("limit", type_=Integer()))
    )


TASK_JSON = literal_column("task", Text())
"""The column :data:`TASK_OBJECT` is read back as: one task as a JSON object."""


def _task_object(rows: Any) -> ColumnElement[Any]:
    """``json_build_object`` of a task's fields from ``rows``, named as ``Task`` names them.

    ``ttl`` and ``run_timeout`` are given in seconds, which pydantic reads as a ``timedelta``.
    """
    pairs: list[Any] = []
    for column in COLUMNS:
        if column.key in IN_MILLISECONDS:
            pairs += [_sql_text(IN_MILLISECONDS[column.key]), rows.c[column.key] / 1000.0]
        else:
            pairs += [_sql_text(str(column.key)), rows.c[column.key]]
    return func.json_build_object(*pairs)


TASK_OBJECT: ColumnElement[Any] = _task_object(TABLE).cast(Text()).label(TASK_JSON.key)
"""The row a statement reads or writes as one JSON object (PostgreSQL), to return in
place of :data:`COLUMNS`.

Decoding 22 columns into Python objects one by one, six of them JSON documents
parsed by ``json.loads``, then validating a ``Task`` from them costs more client
CPU than the statement; pydantic-core parses one JSON text into a ``Task`` for a
fraction of it (as :func:`page_tasks_json` does for pages). It is built in the
statement's own ``RETURNING`` or select list: wrapping the statement in a CTE
to build it outside costs the server more a write.
"""


PAGE_JSON = literal_column("page", Text())
"""The one column of :func:`page_tasks_json`: the page as a JSON array of tasks."""


def page_tasks_json(shape: PageShape) -> ClauseElement:
    """:func:`page_tasks` on PostgreSQL, as one JSON array of tasks built by the server.

    Decoding 22 columns of a hundred rows into Python objects one by one costs
    more than the query; one JSON text parsed by pydantic-core into ``Task``
    models costs a fraction of it. The fields are named as ``Task`` names them
    (``ttl`` in seconds).
    """
    rows = cast(Select[Any], page_tasks(shape)).with_only_columns(
        *[column for column in COLUMNS if column.key not in IN_MILLISECONDS],
        *[(C[key] / 1000.0).label(field) for key, field in IN_MILLISECONDS.items()],
    )
    page = rows.subquery("page_rows")
    newest_first = (page.c.created_at.desc(), page.c.id.desc())
    ordered = func.json_agg(aggregate_order_by(literal_column("page_rows"), *newest_first))
    return select(func.coalesce(ordered, literal_column("'[]'::json")).cast(Text()).label("page"))


_UNSEEN = {
    "postgresql": "NOT EXISTS (SELECT 1 FROM jsonb_each(CAST(:seen AS jsonb)) AS seen"
    " WHERE seen.key = queuestore_tasks.id"
    " AND CAST(seen.value AS integer) >= queuestore_tasks.version)",
    "sqlite": "NOT EXISTS (SELECT 1 FROM json_each(:seen) AS seen"
    " WHERE seen.key = queuestore_tasks.id AND seen.value >= queuestore_tasks.version)",
}
"""Rows at a version newer than ``:seen`` (a JSON object, task id to version) holds."""


def changed_since(dialect: str, *, after: bool) -> ClauseElement:
    """Up to ``:limit`` tasks written after ``:since``, in ``(updated_at, id)`` order.

    With ``after``, only those past the key ``(:after_updated_at, :after_id)``.
    Tasks at a version ``:seen`` names, or older, are left out on the server:
    the change feed reads its last seconds again on every read, and would
    otherwise decode every row of them each time only to drop it.
    Naming every status lets the ``(status, updated_at)`` index serve the range.
    """
    conditions = [
        statuses_in(frozenset(TaskStatus)),
        C.updated_at > bindparam("since", type_=UTCDateTime),
        cast(
            ColumnElement[bool], text(_UNSEEN[dialect]).bindparams(bindparam("seen", type_=Text()))
        ),
    ]
    if after:
        position = tuple_(
            bindparam("after_updated_at", type_=UTCDateTime),
            bindparam("after_id", type_=C.id.type),
        )
        conditions.append(tuple_(C.updated_at, C.id) > position)
    return (
        select(*COLUMNS)
        .where(*conditions)
        .order_by(C.updated_at, C.id)
        .limit(bindparam("limit", type_=Integer()))
    )


COUNT_BY_STATUS = select(C.status, func.count()).group_by(C.status)
"""Tasks per status, every owner's (metrics)."""


def count_unpublished(before: ColumnElement[datetime]) -> Select[int]:
    """Live jobs never published though last written (or, scheduled, due to start) at
    ``before`` or earlier: the outbox backlog (served by the sweep's partial indexes)."""
    return select(func.count()).where(
        *_unpublished(),
        or_(
            and_(C.run_at.is_(None), C.updated_at <= before),
            and_(C.run_at.is_not(None), C.run_at <= before),
        ),
    )


def oldest_waiting(now: ColumnElement[datetime]) -> Select[Any]:
    """The submitted task due by ``now`` written longest ago (by the status index)."""
    return (
        select(*COLUMNS)
        .where(
            C.status == _sql_text(TaskStatus.SUBMITTED.value),
            or_(C.run_at.is_(None), C.run_at <= now),
        )
        .order_by(C.updated_at, C.id)
        .limit(1)
    )


CLOCK = select(func.now().cast(UTCDateTime).label("now"))
"""PostgreSQL's clock, as the store's writes read it."""


class WriteShape(NamedTuple):
    """Everything about a :class:`Write` that changes its SQL (not its values).

    A named tuple, not a frozen dataclass: every write builds one and looks its
    statement up by it, and a tuple is built and hashed in C (the cost model
    in the docs has the figures).
    """

    columns: tuple[str, ...]
    status: TaskStatus | None
    from_statuses: frozenset[TaskStatus]
    scope: str
    versioned: bool
    fence: str
    leased: bool
    claim: bool
    release: bool
    mark_started: bool
    mark_finished: bool
    announce: bool
    stops: bool
    watched: bool
    based: bool
    limits: ConcurrencyLimits | None = None
    hold: bool = False
    flow: FlowControl | None = None

    @classmethod
    def of(
        cls, write: Write, *, announce: bool, stops: bool = False, watched: bool = False
    ) -> WriteShape:
        """The shape of ``write``; ``announce``, ``stops`` and ``watched`` add NOTIFYs.

        ``announce`` tells :data:`NOTIFY_CHANNEL`, ``stops`` :data:`STOP_CHANNEL`,
        and ``watched`` tells :data:`NOTIFY_CHANNEL` when the task is watched
        (PostgreSQL only, all three).
        """
        fence = "any"
        if write.fence is not UNSET:
            fence = "unclaimed" if write.fence is None else "worker"
        return cls(
            columns=tuple(sorted(write.values)),
            status=write.status,
            from_statuses=write.from_statuses,
            scope=scope_kind(write.scope),
            versioned=write.expected_version is not None,
            fence=fence,
            leased=write.expected_lease is not None,
            claim=write.claim is not None,
            release=write.release,
            mark_started=write.mark_started,
            mark_finished=write.mark_finished,
            announce=announce,
            stops=stops,
            watched=watched and not announce,
            based=write.base is not None,
            limits=write.limits,
            hold=write.hold,
            flow=write.flow,
        )

    def params(self, task_id: str, write: Write) -> dict[str, Any]:
        """The parameters of the statement :func:`write_task` builds for this shape."""
        params: dict[str, Any] = {"task_id": task_id}
        params |= {f"v_{name}": value for name, value in write.values.items()}
        if self.scope == "owner":
            params["owner"] = write.scope.owner
        if self.versioned:
            params["expected_version"] = write.expected_version
        if self.fence == "worker":
            params["fence"] = write.fence
        if self.leased:
            params["expected_lease"] = write.expected_lease
        if write.claim is not None:
            params["worker"] = write.claim[0]
            params["job_timeout_ms"] = (
                None if write.timeout is None else round(write.timeout.total_seconds() * 1000)
            )
        if write.base is not None:
            params["base_created_at"] = write.base.created_at
        if write.limits is not None:
            if write.limits.per_owner is not None:
                params["owner_cap"] = write.limits.per_owner
            for index, (name, cap) in enumerate(sorted(write.limits.per_job.items())):
                params |= {f"job_name_{index}": name, f"job_cap_{index}": cap}
        return params


def _assignments(shape: WriteShape, clock: Clock) -> dict[str, Any]:
    """The ``SET`` of a write of ``shape``: each column it writes and its new value."""
    now = clock.now()
    values: dict[str, Any] = {
        name: bindparam(f"v_{name}", type_=C[name].type) for name in shape.columns
    }
    values |= {"updated_at": now, "version": C.version + _ONE}
    if shape.status is not None:
        values["status"] = _sql_text(shape.status.value)
    if shape.claim:
        values |= {
            "worker_id": bindparam("worker", type_=C.worker_id.type),
            "lease_expires_at": clock.later("lease"),
            "attempt": C.attempt + _ONE,
        }
    if shape.claim:
        values["run_deadline_at"] = _run_deadline(clock)
    if shape.release:
        values |= {"worker_id": None, "lease_expires_at": None, "published_at": None}
    if shape.hold:  # the run may still execute: its worker and deadline stay, for the reaper
        values |= {"lease_expires_at": None, "published_at": None}
    if shape.mark_started:
        values["started_at"] = func.coalesce(C.started_at, now)
    if shape.mark_finished:
        values |= {"finished_at": now, "expires_at": clock.expiry()}
    return values


def written_columns(shape: WriteShape, sent: Collection[str] = ()) -> list[ColumnElement[Any]]:
    """What a write of ``shape`` returns when the caller holds the row it changes.

    Every field of a ``Task`` the write sets, as written (the database's clock,
    documents as ``jsonb`` stores them), and ``lease_expires_at``, which a lease
    extension moves without a new version. The rest of the row is the caller's
    copy at the version the write is conditioned on (:attr:`Write.base`), and
    the ``sent`` columns are the write's own values: a status, text or number
    comes back as sent, a document when :func:`stored_as_sent` says so.
    """
    written = {*_assignments(shape, Clock(database_clock=True)), "lease_expires_at"}
    written.difference_update(sent)
    return [column for column in COLUMNS if column.key in written]


def write_task(
    shape: WriteShape, clock: Clock, returning: Sequence[ColumnElement[Any]] = COLUMNS
) -> ClauseElement:
    """The compare-and-set UPDATE for ``shape``, returning the written row as ``returning``.

    The NOTIFYs the shape asks for follow ``returning`` in the same ``RETURNING``.
    """
    values = _assignments(shape, clock)
    conditions = [
        C.id == bindparam("task_id"),
        statuses_in(shape.from_statuses),
        scoped(shape.scope),
    ]
    if shape.versioned:
        conditions.append(C.version == bindparam("expected_version"))
    if shape.fence == "unclaimed":
        conditions.append(C.worker_id.is_(None))
    elif shape.fence == "worker":
        conditions.append(C.worker_id == bindparam("fence", type_=C.worker_id.type))
    if shape.leased:
        conditions.append(C.lease_expires_at == bindparam("expected_lease", type_=UTCDateTime))
    if shape.based:
        # The caller's copy is of this row, not of one deleted since under the same id.
        conditions.append(C.created_at == bindparam("base_created_at", type_=UTCDateTime))
    if shape.claim:
        # Never before its start, on the store's clock, whoever published it early.
        conditions.append(or_(C.run_at.is_(None), C.run_at <= clock.now()))
        conditions.append(_not_parked())
        conditions += _within_deadlines(clock)
    if shape.limits is not None:
        conditions += _within(shape.limits)
    if shape.flow is not None:
        conditions += flow.flow_terms(shape.flow, clock.now())
    # Announce the change in the same statement, hence the same commit.
    change = C.id.concat(_sql_text(":")).concat(C.status)  # in RETURNING: the row as written
    notices = [
        func.pg_notify(_sql_text(channel), change).label(label)
        for channel, label, wanted in (
            (NOTIFY_CHANNEL, "_notified", shape.announce),
            (STOP_CHANNEL, "_stopped", shape.stops),
        )
        if wanted
    ]
    if shape.watched:
        # CASE evaluates pg_notify only for a watched task: the others pay one probe.
        watched = (
            select(WATCHES.c.task_id)
            .where(WATCHES.c.task_id == C.id, WATCHES.c.until > func.now())
            .exists()
        )
        notify = func.pg_notify(_sql_text(NOTIFY_CHANNEL), change)
        notices.append(case((watched, notify)).label("_watched"))
    return update(TABLE).where(*conditions).values(values).returning(*returning, *notices)


def _within_deadlines(clock: Clock) -> list[ColumnElement[bool]]:
    """A claim's deadline terms: not past ``start_by`` unless it started, nor past
    ``deadline_at`` (the reaper ends such a task)."""
    now = clock.now()
    return [
        or_(C.start_by.is_(None), C.started_at.is_not(None), C.start_by > now),
        or_(C.deadline_at.is_(None), C.deadline_at > now),
    ]


def _run_deadline(clock: Clock) -> ColumnElement[Any]:
    """When a claimed run must end: its timeout (the task's, else ``:job_timeout_ms``)
    from now, and no later than the task's ``deadline_at``; NULL without either."""
    timeout = func.coalesce(C.run_timeout_ms, bindparam("job_timeout_ms", type_=BigInteger()))
    return clock.earliest(clock.after_ms(timeout), C.deadline_at)


HELD = TABLE.alias("held")
"""The table again, for the running tasks a claim under concurrency limits counts."""


def _running(sharing: ColumnElement[bool]) -> ColumnElement[int]:
    """How many running tasks (held by a worker) meet ``sharing`` (served by their index)."""
    return (
        select(func.count())
        .select_from(HELD)
        .where(HELD.c.worker_id.is_not(None), sharing)
        .scalar_subquery()
    )


def _within(limits: ConcurrencyLimits) -> list[ColumnElement[bool]]:
    """A claim's terms under ``limits``: its owner and its job have a free slot.

    The limits are parameters (``:owner_cap``, ``:job_name_<i>`` and
    ``:job_cap_<i>`` in name order), so the statement is the same for every task.
    """
    terms: list[ColumnElement[bool]] = []
    if limits.per_owner is not None:
        owner_cap = bindparam("owner_cap", type_=Integer)
        terms.append(or_(C.owner.is_(None), _running(HELD.c.owner == C.owner) < owner_cap))
    if limits.per_job:
        job_cap = case(
            *(
                (
                    C.name == bindparam(f"job_name_{index}", type_=C.name.type),
                    bindparam(f"job_cap_{index}", type_=Integer),
                )
                for index in range(len(limits.per_job))
            ),
            else_=null(),
        )
        terms.append(or_(job_cap.is_(None), _running(HELD.c.name == C.name) < job_cap))
    return terms


LOCK_SLOTS = text(
    """
    SELECT owner, name,
        CASE WHEN :owners_limited AND owner IS NOT NULL
            THEN pg_advisory_xact_lock(1, hashtext(owner)) END AS owner_slots,
        CASE WHEN name = ANY(CAST(:limited_jobs AS text[]))
            THEN pg_advisory_xact_lock(2, hashtext(name)) END AS job_slots
    FROM queuestore_tasks WHERE id = :task_id
    """
)
"""Lock the slots of ``:task_id``'s owner and job for this transaction.

PostgreSQL only. A claim within concurrency limits takes these locks before its
count: two claims for one owner's last slot then count one after the other (at
READ COMMITTED each statement sees what committed before it began). The owner's
lock is always taken before the job's, so two claims cannot wait on each other.
"""

RUNNING_COUNTS = (
    select(C.owner, C.name, func.count()).where(C.worker_id.is_not(None)).group_by(C.owner, C.name)
)
"""The running tasks (held by a worker) by owner and job, from their index."""

WATCH_TASKS = text(
    """
    WITH ids AS (
        SELECT DISTINCT task_id
        FROM jsonb_array_elements_text(CAST(:task_ids AS jsonb)) AS given(task_id)
    ),
    gone AS (
        DELETE FROM queuestore_watches
        WHERE until < now() AND task_id NOT IN (SELECT task_id FROM ids)
    )
    INSERT INTO queuestore_watches (task_id, until)
    SELECT task_id, now() + make_interval(secs => :seconds) FROM ids
    ON CONFLICT (task_id) DO UPDATE
    SET until = greatest(queuestore_watches.until, excluded.until)
    """
)
"""Keep ``:task_ids`` (a JSON array) watched for ``:seconds``; drop the marks run out.

A mark is only ever pushed later, so processes that watch the same task never
cut each other's mark short; the marks dropped are none of these (a row is
written once a statement). PostgreSQL only.
"""


def extend_lease(clock: Clock, returning: Sequence[ColumnElement[Any]] = COLUMNS) -> ClauseElement:
    """Push the lease of ``:task_id`` if ``:worker`` holds it while working (as ``returning``)."""
    return (
        update(TABLE)
        .where(
            C.id == bindparam("task_id"),
            C.status == _sql_text(TaskStatus.WORKING.value),
            C.worker_id == bindparam("worker", type_=C.worker_id.type),
        )
        .values(lease_expires_at=clock.later("lease"))
        .returning(*returning)
    )


DELETE_EXPIRED_POSTGRES = """
WITH own AS (
    SELECT ctid FROM queuestore_tasks
    WHERE expires_at <= {clock} AND status = ANY(:terminal)
    ORDER BY expires_at LIMIT :batch FOR UPDATE SKIP LOCKED
), by_finish AS (
    SELECT ctid FROM queuestore_tasks
    WHERE expires_at IS NULL AND finished_at <= {clock} - :ttl AND status = ANY(:terminal)
    ORDER BY finished_at LIMIT :batch - (SELECT count(*) FROM own) FOR UPDATE SKIP LOCKED
)
DELETE FROM queuestore_tasks
WHERE ctid = ANY(ARRAY(SELECT ctid FROM own UNION ALL SELECT ctid FROM by_finish))
"""
"""One janitor batch on PostgreSQL: two range scans that stop at the limit.

Tasks past their own expiry come first, then tasks past ``finished_at + ttl``;
each scan walks its partial index and stops at the batch size, and skips rows
another transaction holds. A single ``OR`` of both rules made PostgreSQL
bitmap-scan every terminal row on each batch, so every batch paid for the whole
backlog. The rows are deleted by ``ctid``: exactly the ones this statement locked.
"""


def delete_expired_postgres(*, explicit_now: bool) -> TextClause:
    """:data:`DELETE_EXPIRED_POSTGRES` on the database clock, or on ``:now``."""
    return text(DELETE_EXPIRED_POSTGRES.replace("{clock}", ":now" if explicit_now else "now()"))


TERMINAL_VALUES: Final = sorted(status.value for status in TERMINAL)
"""The terminal statuses as the ``status`` column holds them."""

ANNOUNCED: Final = TERMINAL | {TaskStatus.INPUT_REQUIRED, TaskStatus.AUTH_REQUIRED}
"""Statuses a write announces on :data:`NOTIFY_CHANNEL`: the ones ``wait`` and cancels need.

A NOTIFY makes its commit dearer, so the frequent changes (a claim) stay quiet.
"""

MARK_BATCH: Final = 500
"""Publish marks per :func:`mark_published` statement, which keeps its parameters few."""


def page_shape(query: ListQuery, *, after: bool) -> tuple[PageShape, dict[str, Any]]:
    """The statement shape of a listing's filters, and their parameters."""
    shape = PageShape(
        scope=scope_kind(query.scope),
        statuses=query.statuses,
        context_id=query.context_id is not None,
        name=query.name is not None,
        updated_after=query.updated_after is not None,
        after=after,
        created_after=query.created_after is not None,
        created_before=query.created_before is not None,
        parent="any" if query.parent is UNSET else "root" if query.parent is None else "child",
    )
    params: dict[str, Any] = {
        "owner": query.scope.owner,
        "context_id": query.context_id,
        "name": query.name,
        "updated_after": query.updated_after,
        "created_after": query.created_after,
        "created_before": query.created_before,
    }
    if shape.parent == "child":
        params["parent_id"] = query.parent
    return shape, params


def delete_expired(
    now: ColumnElement[datetime], finished_before: ColumnElement[datetime], batch_size: int
) -> Delete:
    """The janitor's batch on SQLite: delete up to ``batch_size`` terminal tasks past their expiry.

    A task with an ``expires_at`` expires then; one without, when it finished
    before ``finished_before`` (now less the janitor's TTL).
    """
    expired = and_(
        C.status.in_(TERMINAL_VALUES),
        or_(
            and_(C.expires_at.is_not(None), C.expires_at <= now),
            and_(
                C.expires_at.is_(None), C.finished_at.is_not(None), C.finished_at <= finished_before
            ),
        ),
    )
    return delete(TABLE).where(C.id.in_(select(C.id).where(expired).limit(batch_size)))


def expired_leases(now: ColumnElement[datetime], limit: int) -> Select[Any]:
    """The reaper's read: working tasks whose lease ran out before ``now``, oldest first."""
    return (
        select(*COLUMNS)
        .where(
            C.lease_expires_at.is_not(None),
            C.lease_expires_at < now,
            C.status == TaskStatus.WORKING.value,
        )
        .order_by(C.lease_expires_at)
        .limit(limit)
    )


def _unpublished() -> list[ColumnElement[bool]]:
    """Pending jobs whose message never went out (:mod:`queuestore.store.pending`)."""
    return [
        C.job,
        C.published_at.is_(None),
        *_pending(),
    ]


def _pending() -> list[ColumnElement[bool]]:
    """The pending rule's terms (:data:`queuestore.store.pending.PENDING_SQL`): a run may
    claim the row. Spelled as the sweep's partial indexes spell it, which SQLite needs."""
    return [C.worker_id.is_(None), _not_parked(), statuses_in(PENDING_STATUSES)]


def _not_parked() -> ColumnElement[bool]:
    """Not parked until its child tasks end (``waits_on``)."""
    return C.waits_on.is_(None)


def _admitted(among: SweepFilter | None) -> list[ColumnElement[bool]]:
    """The terms of a sweep's :class:`SweepFilter`: none without one."""
    if among is None:
        return []
    terms: list[ColumnElement[bool]] = []
    if among.full_owners:
        terms.append(or_(C.owner.is_(None), C.owner.not_in(among.full_owners)))
    if among.full_jobs:
        terms.append(C.name.not_in(among.full_jobs))
    sharing = []
    if among.owner is not None:
        sharing.append(C.owner == among.owner)
    if among.job is not None:
        sharing.append(C.name == among.job)
    if sharing:
        terms.append(or_(*sharing))
    return terms


def unpublished(
    updated_before: ColumnElement[datetime],
    published_before: ColumnElement[datetime] | None,
    limit: int,
    *,
    among: SweepFilter | None = None,
) -> Select[Any]:
    """The sweep's read: unclaimed jobs without a start time, never marked published
    since ``updated_before``.

    With ``published_before``, also those marked before it (their publish may be
    lost), scheduled or not.
    """
    due = and_(C.published_at.is_(None), C.run_at.is_(None), C.updated_at <= updated_before)
    if published_before is not None:
        due = or_(due, C.published_at <= published_before)
    return (
        select(*COLUMNS)
        .where(
            C.job,
            *_pending(),
            due,
            *_admitted(among),
        )
        .order_by(C.priority.desc(), C.updated_at)
        .limit(limit)
    )


def scheduled(
    clock: Clock,
    starts_before: ColumnElement[datetime],
    updated_before: ColumnElement[datetime],
    ahead: timedelta,
    limit: int,
    *,
    among: SweepFilter | None = None,
) -> Select[Any]:
    """The sweep's read of scheduled jobs never published that start before
    ``starts_before``, soonest first.

    A job ``submit`` published (its start was within ``ahead`` of its last write)
    waits, like any other, until its last write is ``updated_before``.
    """
    return (
        select(*COLUMNS)
        .where(
            *_unpublished(),
            C.run_at.is_not(None),
            C.run_at <= starts_before,
            or_(C.updated_at <= updated_before, clock.apart(C.run_at, C.updated_at, ahead)),
            *_admitted(among),
        )
        .order_by(C.priority.desc(), C.run_at)
        .limit(limit)
    )


def mark_published(marks: Sequence[tuple[str, int | None]], now: ColumnElement[datetime]) -> Update:
    """Mark the tasks' jobs published at ``now``: by id and version, or by id alone (None).

    At most :data:`MARK_BATCH` marks a statement.
    """
    versioned = [(task_id, version) for task_id, version in marks if version is not None]
    plain = [task_id for task_id, version in marks if version is None]
    which = []
    if versioned:
        which.append(tuple_(C.id, C.version).in_(versioned))
    if plain:
        which.append(C.id.in_(plain))
    return update(TABLE).where(or_(*which)).values(published_at=now)
