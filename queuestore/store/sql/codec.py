"""The one way between the SQL store's rows and ``Task``: every read and write decodes here.

A read's row holds a task in one of two forms, and :func:`task` decodes both
(:func:`tasks`, a listing's rows):

- on PostgreSQL a statement returns the task as one JSON object (or a page as
  one JSON array), built by the server (``queries.TASK_OBJECT``,
  ``queries.page_tasks_json``), which pydantic-core parses straight into
  ``Task`` models;
- on SQLite it returns the columns, decoded by their SQLAlchemy types.

A write to a row the caller holds returns only the columns the database
decides, and the rest comes from the caller's copy: :func:`task_after_write`.

The other way, :func:`column_value` turns a value of a ``Task`` into what its
column takes, and :func:`stored_as_sent` says when a document a write sends is
what a read would give back (so the write need not return it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, Final

from pydantic import BaseModel, TypeAdapter
from sqlalchemy import JSON

from queuestore.core.models import Artifact, PageOfTasks, Step, Task, TaskError, TaskStatus
from queuestore.core.watch import StatusChange
from queuestore.store.sql.queries import COLUMNS, IN_MILLISECONDS, PAGE_JSON, TASK_JSON

_PAGE: Final = TypeAdapter(PageOfTasks)


def task(row: dict[str, Any]) -> Task:
    """The task a read's row holds, in either form a statement returns it.

    On PostgreSQL the row is one JSON object the server built
    (``queries.TASK_JSON``), parsed by pydantic-core straight into the model;
    on SQLite it is the columns as their SQLAlchemy types decode them
    (``ttl_ms`` and ``run_timeout_ms`` included). ``row`` is the caller's fresh
    row (a decoded row, a row's mapping copied): it is taken over, not copied again.
    """
    built = row.get(TASK_JSON.key)
    if built is not None:
        return Task.model_validate_json(built)
    for column, field in IN_MILLISECONDS.items():
        milliseconds = row.pop(column)
        row[field] = None if milliseconds is None else timedelta(milliseconds=milliseconds)
    return Task.model_validate(row)


def step(row: dict[str, Any]) -> Step:
    """The step a row of ``steps.task_steps`` holds (its task's id left out)."""
    del row["task_id"]
    return Step.model_validate(row)


def tasks(rows: Sequence[dict[str, Any]]) -> list[Task]:
    """The tasks a listing's rows hold: one row of a JSON array on PostgreSQL
    (``queries.PAGE_JSON``), one row per task as :func:`task` decodes it on SQLite."""
    if len(rows) == 1 and PAGE_JSON.key in rows[0]:
        return _PAGE.validate_json(rows[0][PAGE_JSON.key])
    return [task(row) for row in rows]


_WRITTEN_AS: dict[str, Callable[[Any], Any]] = {
    "error": TypeAdapter(TaskError | None).validate_python,
    "artifacts": TypeAdapter(list[Artifact]).validate_python,
    "errors": TypeAdapter(list[TaskError]).validate_python,
}
"""The columns a write returns that a ``Task`` holds as another type than the driver's."""


def task_after_write(base: Task, written: Mapping[str, Any], sent: Mapping[str, Any]) -> Task:
    """``base`` with the columns a write returned and the values it ``sent`` as they are.

    Only the returned values the driver does not give as ``Task`` holds them
    are converted; the task is not validated again as a whole.
    """
    changes = {
        name: value if (convert := _WRITTEN_AS.get(name)) is None else convert(value)
        for name, value in written.items()
    }
    return base.model_copy(update={**changes, **sent})


def column_value(value: Any) -> Any:
    """A value of a ``Task`` as its column takes it: records as JSON objects."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list):
        return [column_value(item) for item in value]
    return value


def status_change(payload: str) -> StatusChange:
    """A NOTIFY's payload, ``<task id>:<status>``, as the change it announces."""
    task_id, _, status = payload.rpartition(":")
    return task_id, TaskStatus(status)


DOCUMENTS: Final = frozenset(str(column.key) for column in COLUMNS if isinstance(column.type, JSON))
"""The columns that hold a JSON document."""

EXPONENT_FLOATS: Final = 1e16
"""From here up, a float is encoded with an exponent (``1e+16``): by ``json.dumps`` and by
pydantic-core's encoder alike, whichever the engine hands its driver."""

STORED_AS_SENT_VALUES: Final = 1000
"""How many values :func:`stored_as_sent` looks at before it lets a read decide."""


def stored_as_sent(document: Any) -> bool:
    """Whether a read gives ``document`` (a validated JSON value) back equal to itself.

    ``jsonb`` keeps a number's digits, not its float: a float the driver writes
    with an exponent (:data:`EXPONENT_FLOATS` and up) comes back as the integer
    it spells, no longer equal to the float. Every other value comes back equal
    (``-0.0`` as ``0.0``, an object's keys in ``jsonb``'s order, which equality
    ignores). SQLite's JSON is the text as written. A document of more than
    :data:`STORED_AS_SENT_VALUES` values is not looked through: it is read back.
    """
    pending = [document]
    for _ in range(STORED_AS_SENT_VALUES):
        if not pending:
            return True
        value = pending.pop()
        if isinstance(value, dict):
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
        elif isinstance(value, float) and abs(value) >= EXPONENT_FLOATS:
            return False
    return not pending
