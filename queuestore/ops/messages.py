"""What the ``queuestore`` command says when something fails: one line, in the user's words.

A message names what the user typed (the option, the argument, the
``QUEUESTORE_*`` variable), says what was wrong with it, and, where there is
one, what to do. :func:`explain` turns the library's errors into such a line
and the command's exit code: 2 for bad usage or configuration, 1 when the
store refused or could not be reached.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from queuestore.core.errors import (
    CallbackRefused,
    InvalidCursor,
    InvalidTaskData,
    QueueStoreError,
    StoreUnavailable,
)

USAGE, REFUSED = 2, 1
"""The exit codes: bad usage or configuration; the store refused or failed."""

OPTIONS = {
    "name": "NAME",
    "input": "INPUT",
    "task_id": "TASK_ID",
    "delivery_id": "DELIVERY_ID",
    "status": "--status",
    "limit": "--limit",
    "owner": "--owner",
    "context_id": "--context-id",
    "run_at": "--at",
    "delay": "--delay",
    "unique_key": "--unique-key",
    "priority": "--priority",
    "callback.url": "--callback",
    "callback": "--callback",
    "ttl": "--ttl",
    "batch_size": "--batch-size",
}
"""The command's word for each field the store names in an error."""

_SETTING_KINDS = {
    "time_delta_parsing": "must be seconds (30) or an ISO 8601 duration (PT30S)",
    "time_delta_type": "must be seconds (30) or an ISO 8601 duration (PT30S)",
    "int_parsing": "must be a whole number",
    "int_type": "must be a whole number",
    "float_parsing": "must be a number",
    "bool_parsing": "must be true or false",
    "json_invalid": "must be JSON",
}
"""What a setting of each kind must look like, by pydantic's error type."""

_NO_SCHEMA = re.compile(r'no such table: queuestore_|relation "queuestore_\w+" does not exist')
"""How SQLite and PostgreSQL say that queuestore's tables are missing."""


def explain(exc: BaseException) -> tuple[str, int] | None:
    """The line to print for ``exc`` and the exit code; None for an error that is not ours."""
    if isinstance(exc, ValidationError):
        if exc.title == "Settings":
            return setting_error(exc), USAGE
        return field_error(exc), USAGE
    if isinstance(exc, InvalidTaskData):
        return data_error(exc), USAGE
    if isinstance(exc, InvalidCursor):
        return cursor_error(exc), USAGE
    if isinstance(exc, StoreUnavailable):
        return unavailable(str(exc)), REFUSED
    if isinstance(exc, QueueStoreError):
        return str(exc), REFUSED
    if isinstance(exc, ArgumentError):  # a URL SQLAlchemy cannot read
        return (
            f"QUEUESTORE_DATABASE_URL (or --url) is not a database URL: {exc}; "
            "e.g. postgresql://user@host/queuestore or sqlite:///queuestore.db",
            USAGE,
        )
    if isinstance(exc, SQLAlchemyError):  # the schema commands use the engine directly
        reason = str(getattr(exc, "orig", None) or exc).splitlines()[0]
        return unavailable(f"database unavailable: {reason}"), REFUSED
    return None


def setting_error(exc: ValidationError) -> str:
    """A bad ``QUEUESTORE_*`` variable, named as it is set (its value is never echoed)."""
    first = exc.errors()[0]
    name = "QUEUESTORE_" + str(first["loc"][0]).upper() if first["loc"] else "a setting"
    said = _SETTING_KINDS.get(first["type"]) or _lowered(first["msg"])
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{name} {said}{more}; see queuestore config reference"


def field_error(exc: ValidationError) -> str:
    """A value the command passed on that pydantic refused, named by its option."""
    first = exc.errors()[0]
    field = ".".join(str(part) for part in first["loc"])
    return f"{OPTIONS.get(field, field)}: {_lowered(first['msg'])}"


def data_error(exc: InvalidTaskData) -> str:
    """Input the store refused, named by the option or argument that gave it."""
    field = exc.field
    said = str(exc).removeprefix(f"{field}: ") if field else str(exc)
    if isinstance(exc, CallbackRefused) and exc.reason.startswith(("host is", "resolves to")):
        said += "; QUEUESTORE_CALLBACK_ALLOW_NETWORKS allows such addresses"
    return f"{OPTIONS.get(field, field)}: {said}" if field else said


def cursor_error(exc: InvalidCursor) -> str:
    reason = str(exc).removeprefix("cursor ")
    return (
        f"--cursor: this cursor {reason}; give the filters of the listing that printed it, "
        "with the same QUEUESTORE_CURSOR_SECRET, or list again without --cursor"
    )


def unavailable(message: str) -> str:
    """The store could not answer; when its tables are missing, how to make them."""
    if _NO_SCHEMA.search(message):
        return f"{message}: the database has no queuestore schema yet; run queuestore db upgrade"
    return message


def _lowered(message: Any) -> str:
    text = str(message)
    return text[:1].lower() + text[1:]
