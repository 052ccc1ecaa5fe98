"""The statements of flow control on SQL: a claim's pause and rate terms, its start's
log entry, and the pauses, starts and turns off the claim's path.

The claim's terms are built from a :class:`~queuestore.core.flow.FlowControl`
into the claim's own UPDATE (:func:`queuestore.store.sql.queries.write_task`):
a task's key, bucket and cost are read from its row (its owner, a field of its
input) by the same expressions on both dialects, so the claim, the log entry
and the lock agree on them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final, cast

from sqlalchemy import (
    Connection,
    Table,
    bindparam,
    case,
    delete,
    func,
    insert,
    literal,
    null,
    or_,
    select,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql import ColumnElement

from queuestore.core.flow import FlowControl, Pause, PauseKind, RateLimit, input_field
from queuestore.store.sql.schema import PauseRow, RateStartRow, RateWaitRow, TaskRow

TASKS = cast(Table, TaskRow.__table__)
C = TASKS.c
PAUSES = cast(Table, PauseRow.__table__)
P = PAUSES.c
STARTS = cast(Table, RateStartRow.__table__)
S = STARTS.c
WAITS = cast(Table, RateWaitRow.__table__)

RATE_LOCK: Final = 4
"""The advisory lock space (PostgreSQL) of a rate limit's buckets, after the slots' 1 and 2."""


def _field(spec: str) -> ColumnElement[Any]:
    """The value ``spec`` (``owner`` or ``input.<field>``) names in a task's row, as text."""
    if spec == "owner":
        return C.owner
    value: ColumnElement[Any] = C.input[input_field(spec) or ""].as_string()
    return value


def _by_job(flow: FlowControl, value: Any) -> ColumnElement[Any]:
    """``CASE name WHEN job THEN value(rate) ... END``: NULL for a job without a rate."""
    whens = [
        (C.name == literal(name), value(rate))
        for name, rate in flow.rates.items()
        if value(rate) is not None
    ]
    return case(*whens, else_=null()) if whens else null()


def key_of(flow: FlowControl) -> ColumnElement[Any]:
    """The row's key, as its job's rate limit takes it (NULL without one)."""
    return _by_job(flow, lambda rate: None if rate.key is None else _field(rate.key))


def bucket_of(flow: FlowControl) -> ColumnElement[Any]:
    """The row's bucket: ``job``, or ``job|key`` (NULL for a job without a rate)."""

    def bucket(rate: RateLimit) -> ColumnElement[Any]:
        if rate.key is None:
            return C.name
        return C.name.concat(literal("|")).concat(func.coalesce(_field(rate.key), literal("")))

    return _by_job(flow, bucket)


def cost_of(flow: FlowControl) -> ColumnElement[Any]:
    """The units the row's start costs, at most its limit (NULL for a job without a rate)."""

    def cost(rate: RateLimit) -> ColumnElement[Any]:
        if isinstance(rate.cost, int):
            return literal(min(rate.cost, rate.limit))
        given = func.coalesce(C.input[input_field(rate.cost) or ""].as_integer(), 1)
        return case((given > rate.limit, rate.limit), (given < 1, 1), else_=given)

    return _by_job(flow, cost)


def _limit_of(flow: FlowControl) -> ColumnElement[Any]:
    return _by_job(flow, lambda rate: literal(rate.limit))


def _period_ms_of(flow: FlowControl) -> ColumnElement[Any]:
    return _by_job(flow, lambda rate: literal(rate.period_ms))


def paused(flow: FlowControl, now: ColumnElement[datetime]) -> ColumnElement[bool]:
    """Whether a pause in force stops the row: of its job, its owner or its key."""
    targets = [
        literal("job:").concat(C.name),
        literal("owner:").concat(C.owner),
    ]
    if any(rate.key is not None for rate in flow.rates.values()):
        targets.append(literal("key:").concat(key_of(flow)))
    return (
        select(P.target)
        .where(P.target.in_(targets), or_(P.until.is_(None), P.until > now))
        .exists()
    )


def within_rate(flow: FlowControl, now: ColumnElement[datetime]) -> ColumnElement[bool]:
    """Whether the row's start fits its rate: the costs logged in the period, plus its own."""
    bucket = bucket_of(flow)
    used = (
        select(func.coalesce(func.sum(S.cost), 0))
        .where(S.bucket == bucket, S.until > now)
        .scalar_subquery()
    )
    return or_(bucket.is_(None), used + cost_of(flow) <= _limit_of(flow))


def flow_terms(flow: FlowControl, now: ColumnElement[datetime]) -> list[ColumnElement[bool]]:
    """A claim's terms under ``flow``: no pause stops it, and its start fits its rate."""
    terms = [~paused(flow, now)]
    if flow.rates:
        terms.append(within_rate(flow, now))
    return terms


def log_start(flow: FlowControl, later: Any) -> Any:
    """Log the start of the task ``:task_id`` that ``:worker`` just claimed, in its bucket.

    ``later`` gives the clock plus a number of milliseconds (``Clock.after_ms``).
    Nothing for a job without a rate.
    """
    bucket = bucket_of(flow)
    rows = select(bucket, cost_of(flow), later(_period_ms_of(flow))).where(
        C.id == bindparam("task_id"),
        C.worker_id == bindparam("worker"),
        bucket.is_not(None),
    )
    return insert(STARTS).from_select(["bucket", "cost", "until"], rows)


def claim_logging_start(claim: Any, flow: FlowControl, later: Any, task: Any) -> Any:
    """The claim ``claim`` (an UPDATE returning ``task``) that logs its start in the same
    statement (PostgreSQL): the written row's bucket, cost and end of period go into
    :data:`STARTS` from its ``RETURNING``, and the statement returns ``task`` (and the
    claim's NOTIFYs, which the reader drops)."""
    bucket = bucket_of(flow)
    claimed = claim.returning(
        bucket.label("rate_bucket"),
        cost_of(flow).label("rate_cost"),
        later(_period_ms_of(flow)).label("rate_until"),
    ).cte("claimed")
    logged = insert(STARTS).from_select(
        ["bucket", "cost", "until"],
        select(claimed.c.rate_bucket, claimed.c.rate_cost, claimed.c.rate_until).where(
            claimed.c.rate_bucket.is_not(None)
        ),
    )
    notices = [column for column in claimed.c if column.key.startswith("_")]  # its NOTIFYs
    return select(claimed.c[task.key], *notices).add_cte(logged.cte("logged"))


def lock_bucket(flow: FlowControl) -> Any:
    """Lock the bucket of the task ``:task_id`` for this transaction (PostgreSQL).

    Taken after the concurrency slots' locks: two claims for a bucket's last
    units then count one after the other.
    """
    bucket = bucket_of(flow)
    locked = func.pg_advisory_xact_lock(literal(RATE_LOCK), func.hashtext(bucket))
    return select(locked).where(C.id == bindparam("task_id"), bucket.is_not(None))


# -- off the claim's path ----------------------------------------------------


def pause(
    connection: Connection,
    given: Pause,
    now: datetime,
    *,
    postgres: bool,
) -> Pause:
    """Insert the pause ``given``, or extend the one in force (the later end; none over any)."""
    key, until, reason = given.target, given.until, given.reason
    kept = connection.execute(
        select(P.until, P.reason, P.created_at).where(P.target == key).with_for_update()
    ).first()
    created = now
    if kept is not None and (kept.until is None or kept.until > now):
        until = None if kept.until is None or until is None else max(kept.until, until)
        reason = reason or kept.reason
        created = kept.created_at
    row = {
        "target": key,
        "kind": given.kind.value,
        "value": given.value,
        "until": until,
        "reason": reason,
        "created_at": created,
    }
    dialect: Any = postgresql if postgres else sqlite
    upsert = dialect.insert(PAUSES).values(row)
    upsert = upsert.on_conflict_do_update(
        index_elements=[P.target],
        set_={name: upsert.excluded[name] for name in ("until", "reason", "created_at")},
    )
    connection.execute(upsert)
    return Pause(given.kind, given.value, until, reason, created)


def resume(connection: Connection, key: str) -> bool:
    """Delete the pause ``key``; whether there was one."""
    return connection.execute(delete(PAUSES).where(P.target == key)).rowcount > 0


def pauses(connection: Connection, now: datetime) -> list[Pause]:
    """The pauses in force, by target."""
    rows = connection.execute(
        select(P.kind, P.value, P.until, P.reason, P.created_at)
        .where(or_(P.until.is_(None), P.until > now))
        .order_by(P.target)
    )
    return [
        Pause(PauseKind(row.kind), row.value, row.until, row.reason, row.created_at) for row in rows
    ]


def paused_until(
    connection: Connection, keys: Sequence[str], now: datetime
) -> tuple[bool, datetime | None]:
    """Whether a pause among ``keys`` is in force, and when the last ends (None: never)."""
    ends = [
        row.until
        for row in connection.execute(
            select(P.until).where(P.target.in_(keys), or_(P.until.is_(None), P.until > now))
        )
    ]
    if not ends:
        return False, None
    return True, None if None in ends else max(end for end in ends if end is not None)


def rate_starts(connection: Connection, bucket: str, now: datetime) -> list[tuple[datetime, int]]:
    """The starts of ``bucket`` still counting: ``(until, cost)``, soonest first."""
    rows = connection.execute(
        select(S.until, S.cost).where(S.bucket == bucket, S.until > now).order_by(S.until)
    )
    return [(row.until, row.cost) for row in rows]


def rate_use(connection: Connection, now: datetime) -> dict[str, tuple[int, datetime | None]]:
    """By bucket with starts still counting or a turn to come: the units its starts cost,
    and the latest turn given to a waiting task (None: none to come)."""
    used = select(S.bucket, func.sum(S.cost)).where(S.until > now).group_by(S.bucket)
    counted: dict[str, tuple[int, datetime | None]] = {
        bucket: (int(units), None) for bucket, units in connection.execute(used)
    }
    turns = select(WAITS.c.bucket, WAITS.c.next_wake).where(WAITS.c.next_wake > now)
    for bucket, wake in connection.execute(turns):
        counted[bucket] = (counted.get(bucket, (0, None))[0], wake)
    return counted


def reserve_wake(
    connection: Connection, bucket: str, free_at: datetime, step: Any, *, postgres: bool
) -> datetime:
    """The next waiter's turn in ``bucket``, kept as the last given (one transaction)."""
    last = connection.execute(
        select(WAITS.c.next_wake).where(WAITS.c.bucket == bucket).with_for_update()
    ).scalar()
    wake = free_at if last is None else max(free_at, last + step)
    dialect: Any = postgresql if postgres else sqlite
    upsert = dialect.insert(WAITS).values(bucket=bucket, next_wake=wake)
    connection.execute(
        upsert.on_conflict_do_update(
            index_elements=[WAITS.c.bucket], set_={"next_wake": upsert.excluded.next_wake}
        )
    )
    return wake


def prune(connection: Connection, now: datetime) -> int:
    """Delete the starts past their period, the turns past, the pauses ended; how many."""
    deleted = connection.execute(delete(STARTS).where(S.until <= now)).rowcount
    deleted += connection.execute(delete(WAITS).where(WAITS.c.next_wake <= now)).rowcount
    ended = delete(PAUSES).where(P.until.is_not(None), P.until <= now)
    return deleted + connection.execute(ended).rowcount
