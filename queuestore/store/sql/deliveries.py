"""The statements of push on SQL: callbacks, and the outbox a trigger fills.

Off the hot path of tasks: they are built per call with SQLAlchemy Core on the
tables of :mod:`queuestore.store.sql.schema`. The deliveries themselves are
inserted by the trigger of migration 0009, never here, except the catch-up
delivery of a callback registered on a task already in a status it wants.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final, cast

from sqlalchemy import (
    ColumnElement,
    Connection,
    Table,
    and_,
    delete,
    exists,
    false,
    func,
    insert,
    select,
    true,
    update,
)
from sqlalchemy.orm import aliased

from queuestore.core.callbacks import Callback, Delivery, DeliveryState, event_id, snapshot
from queuestore.core.models import Task
from queuestore.core.owner import OwnerScope
from queuestore.store.deliveries import Outgoing, Settlement, catch_up
from queuestore.store.sql import codec, queries
from queuestore.store.sql.schema import CallbackRow, DeliveryRow

DELIVERY_CHANNEL: Final = "queuestore_deliveries"
"""The PostgreSQL channel the trigger NOTIFYs when it commits deliveries."""

CALLBACKS = cast(Table, CallbackRow.__table__)
DELIVERIES = cast(Table, DeliveryRow.__table__)
C = CALLBACKS.c
D = DELIVERIES.c

_CALLBACK_FIELDS = [column.name for column in CALLBACKS.columns if column.name != "key"]
_DELIVERY_COLUMNS = [column for column in DELIVERIES.columns if column.name != "task"]


def callback(row: Mapping[str, Any]) -> Callback:
    """The record of a callbacks row."""
    return Callback.model_validate({field: row[field] for field in _CALLBACK_FIELDS})


def delivery(row: Mapping[str, Any], url: str) -> Delivery:
    """The record of a deliveries row (and its callback's id and URL)."""
    return Delivery(
        id=row["id"],
        event_id=event_id(row["callback_key"], row["version"]),
        task_id=row["task_id"],
        callback_id=row["callback_id"],
        url=url,
        status=row["status"],
        version=row["version"],
        state=row["state"],
        tries=row["tries"],
        created_at=row["created_at"],
        next_try_at=row["next_try_at"],
        delivered_at=row["delivered_at"],
        last_error=row["last_error"],
        response_status=row["response_status"],
        task=_task(row["task"]),
    )


def _task(document: Any) -> Task:
    """The task of a snapshot the trigger wrote (SQLite's is text, its timestamps naive UTC)."""
    fields = json.loads(document) if isinstance(document, str) else dict(document)
    for name in ("created_at", "updated_at", "started_at", "finished_at"):
        value = fields.get(name)
        if isinstance(value, str) and value[-6] not in "+-" and not value.endswith("Z"):
            fields[name] = datetime.fromisoformat(value).replace(tzinfo=UTC)
    return Task.model_validate(fields)


def add_callback(
    connection: Connection,
    key: str,
    new: Callback,
    scope: OwnerScope,
    task_may_follow: bool,
    *,
    postgres: bool,
) -> tuple[Callback | None, bool]:
    """Insert or replace a callback and its catch-up delivery, in the connection's transaction.

    Returns the callback (None if the task is not visible) and whether a
    delivery was committed.
    """
    statement = select(*queries.COLUMNS).where(queries.C.id == new.task_id)
    if postgres:
        statement = statement.with_for_update()  # a status change waits for the callback
    found = connection.execute(statement).mappings().first()
    task = None if found is None else codec.task(dict(found))
    if task is None and not task_may_follow:
        return None, False
    if task is not None and not scope.admits(task.owner):
        return None, False
    if task is not None:
        new = new.model_copy(update={"owner": task.owner})
    fields = new.model_dump(mode="python")
    taken = connection.execute(
        select(C.key).where(C.task_id == new.task_id, C.id == new.id)
    ).scalar()
    if taken is None:
        connection.execute(insert(CALLBACKS).values(key=key, **fields))
    else:
        key = taken
        connection.execute(update(CALLBACKS).where(C.key == key).values(**fields))
    if taken is not None or task is None or not catch_up(new, task.status):
        return new, False
    connection.execute(
        insert(DELIVERIES).values(
            callback_key=key,
            task_id=task.id,
            status=task.status.value,
            version=task.version,
            task=snapshot(task).model_dump(mode="json"),
            created_at=task.updated_at,
            next_try_at=task.updated_at,
        )
    )
    if postgres:
        connection.execute(select(func.pg_notify(DELIVERY_CHANNEL, f"{task.id}:{task.status}")))
    return new, True


def callbacks(connection: Connection, task_id: str, scope: OwnerScope) -> list[Callback]:
    """The task's callbacks ``scope`` admits, oldest first."""
    statement = select(*CALLBACKS.columns).where(C.task_id == task_id, _admitted(scope))
    rows = connection.execute(statement.order_by(C.created_at, C.key)).mappings()
    return [callback(dict(row)) for row in rows]


def _admitted(scope: OwnerScope) -> ColumnElement[bool]:
    """The callbacks whose owner ``scope`` admits."""
    if scope.unscoped:
        return true()
    if scope.nobody:
        return false()
    owner: ColumnElement[bool] = (
        C.owner.is_(None) if scope.owner is None else C.owner == scope.owner
    )
    return owner


def remove_callbacks(
    connection: Connection, task_id: str, callback_id: str | None, scope: OwnerScope
) -> int:
    """Delete the callbacks and their pending deliveries; how many callbacks."""
    condition = and_(C.task_id == task_id, _admitted(scope))
    if callback_id is not None:
        condition = and_(condition, C.id == callback_id)
    keys = list(connection.execute(select(C.key).where(condition)).scalars())
    if not keys:
        return 0
    connection.execute(
        delete(DELIVERIES).where(D.callback_key.in_(keys), D.state == DeliveryState.PENDING.value)
    )
    connection.execute(delete(CALLBACKS).where(C.key.in_(keys)))
    return len(keys)


def deliveries(connection: Connection, task_id: str) -> list[Delivery]:
    """The task's deliveries, oldest first, with their callbacks' ids and URLs."""
    statement = (
        select(*DELIVERIES.columns, C.id.label("callback_id"), C.url)
        .join(CALLBACKS, C.key == D.callback_key, isouter=True)
        .where(D.task_id == task_id)
        .order_by(D.id)
    )
    return [_listed(dict(row)) for row in connection.execute(statement).mappings()]


def _listed(row: Mapping[str, Any]) -> Delivery:
    # A delivered or dead delivery outlives a callback removed since: it keeps no URL.
    fields = dict(row)
    fields["callback_id"] = fields["callback_id"] or "(removed)"
    return delivery(fields, fields["url"] or "")


def revive(connection: Connection, task_id: str, delivery_id: int, now: Any) -> Delivery | None:
    """Make a dead delivery pending and due ``now``."""
    changed = connection.execute(
        update(DELIVERIES)
        .where(D.id == delivery_id, D.task_id == task_id, D.state == DeliveryState.DEAD.value)
        .values(state=DeliveryState.PENDING.value, next_try_at=now)
        .returning(D.id)
    ).first()
    if changed is None:
        return None
    return next(d for d in deliveries(connection, task_id) if d.id == delivery_id)


def take(
    connection: Connection, limit: int, now: Any, until: Any, *, postgres: bool
) -> list[Outgoing]:
    """Take the due heads of the callbacks' queues until ``until``; see ``take_deliveries``."""
    earlier = aliased(DELIVERIES)
    head = ~exists().where(
        earlier.c.callback_key == D.callback_key,
        earlier.c.state == DeliveryState.PENDING.value,
        earlier.c.id < D.id,
    )
    due = (
        select(D.id)
        .where(D.state == DeliveryState.PENDING.value, D.next_try_at <= now, head)
        .order_by(D.next_try_at, D.id)
        .limit(limit)
    )
    if postgres:
        due = due.with_for_update(skip_locked=True)
    rows = (
        connection.execute(
            update(DELIVERIES)
            .where(D.id.in_(due.scalar_subquery()))
            .values(tries=D.tries + 1, next_try_at=until)
            .returning(*DELIVERIES.columns)
        )
        .mappings()
        .all()
    )
    if not rows:
        return []
    keys = {row["callback_key"] for row in rows}
    found = connection.execute(select(*CALLBACKS.columns).where(C.key.in_(keys))).mappings()
    by_key = {row["key"]: callback(dict(row)) for row in found}
    taken = [
        Outgoing(delivery({**row, "callback_id": cb.id}, cb.url), cb)
        for row in rows
        if (cb := by_key.get(row["callback_key"])) is not None
    ]
    return sorted(taken, key=lambda outgoing: outgoing.delivery.id)


def settle(
    connection: Connection, delivery_id: int, tries: int, settlement: Settlement, now: Any
) -> bool:
    """Write how a try ended, if the delivery is still that try's."""
    delivered = settlement.state is DeliveryState.DELIVERED
    changed = connection.execute(
        update(DELIVERIES)
        .where(
            D.id == delivery_id,
            D.tries == tries,
            D.state == DeliveryState.PENDING.value,
        )
        .values(
            state=settlement.state.value,
            response_status=settlement.response_status,
            last_error=None if delivered else settlement.error,
            next_try_at=settlement.retry_at,
            delivered_at=now if delivered else None,
        )
        .returning(D.callback_key)
    ).first()
    if changed is None:
        return False
    if settlement.retry_at is not None:
        # The callback's later deliveries wait behind this one: not due before it,
        # so that taking the due heads never reads through a failing receiver's backlog.
        connection.execute(
            update(DELIVERIES)
            .where(
                D.callback_key == changed.callback_key,
                D.state == DeliveryState.PENDING.value,
                D.id > delivery_id,
                D.next_try_at < settlement.retry_at,
            )
            .values(next_try_at=settlement.retry_at)
        )
    return True


def count(connection: Connection) -> dict[DeliveryState, int]:
    """Deliveries by state."""
    rows = connection.execute(select(D.state, func.count()).group_by(D.state))
    return {DeliveryState(state): number for state, number in rows}
