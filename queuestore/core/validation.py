"""Input checks shared by every store: bad input raises before anything is written."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from types import UnionType
from typing import Any, Final, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, JsonValue, ValidationError
from pydantic_core import from_json, to_json

from queuestore.core import large_json
from queuestore.core.errors import InvalidTaskData
from queuestore.core.models import (
    TASK_ID_PATTERN,
    Artifact,
    JsonObject,
    PageOfTasks,
    TaskError,
    TaskStatus,
)

DEFAULT_MAX_PAYLOAD_BYTES: Final = 1 << 20
MAX_NAME_LENGTH: Final = 200
MAX_LABEL_LENGTH: Final = 256
MAX_MESSAGE_LENGTH: Final = 10_000
MAX_PAGE_SIZE: Final = 1000
_PARSER_NESTING: Final = 201
"""The deepest nesting pydantic-core's JSON parser takes (its recursion limit), counting
an empty innermost container; a container at that depth that holds a value is refused."""


def _containers_around(shape: object) -> int | None:
    """How many lists and objects a read's ``shape`` wraps its deepest checked document in.

    A checked document is what :func:`json_value` (a JSON value or object) or
    :func:`record` (an artifact, an error) decides as one; None: ``shape`` holds none.
    """
    if shape is JsonValue or shape in (JsonObject, Artifact, TaskError):
        return 0
    args = get_args(shape)
    if get_origin(shape) in (Union, UnionType):
        return _deepest(args)
    if get_origin(shape) is list:
        below = _deepest(args)
    elif isinstance(shape, type) and issubclass(shape, BaseModel):
        below = _deepest(field.annotation for field in shape.model_fields.values())
    else:
        return None
    return None if below is None else below + 1


def _deepest(shapes: Iterable[object]) -> int | None:
    """The most containers any of ``shapes`` wraps a checked document in."""
    found = [n for n in map(_containers_around, shapes) if n is not None]
    return max(found, default=None)


_READ_NESTING: Final = _containers_around(PageOfTasks) or 0
"""How deep a read parses a document: in a page's array, a task, its artifacts (or answers),
as the page's shape (:data:`~queuestore.core.models.PageOfTasks`) says."""
MAX_NESTING: Final = _PARSER_NESTING - _READ_NESTING
"""How deep a JSON document may nest for every read to parse it (PostgreSQL reads as JSON)."""
VALIDATOR_MAX_CONTAINERS: Final = MAX_NESTING - 1
"""The most lists and objects a document the validator decides may hold. The parser takes
its deepest level only when that container is empty: one below, the round trip takes
every document whatever its deepest level holds, so both paths agree."""

_MILLISECOND: Final = timedelta(milliseconds=1)
_NUL_MESSAGE: Final = "must not contain the NUL character (PostgreSQL cannot store it)"

M = TypeVar("M", bound=BaseModel)

NAME_PATTERN: Final = r"^[^\s\x00-\x1f\x7f-\x9f]+$"
r"""A job name: no whitespace or control characters (C0 and C1). C1's U+0085 is
named too, though Python's ``\s`` covers it: JSON Schema's (ECMA-262) does not."""
_NAME = re.compile(NAME_PATTERN)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def task_id(value: object, field: str = "task_id") -> str:
    """A task id: 1..64 url-safe base64 characters."""
    if not isinstance(value, str) or not TASK_ID_PATTERN.match(value):
        raise InvalidTaskData("must be 1 to 64 characters of [A-Za-z0-9_-]", field=field)
    return value


def name(value: object) -> str:
    """A job name such as ``reports.build``: no spaces or control characters."""
    if not isinstance(value, str) or not value:
        raise InvalidTaskData("must be a non-empty string", field="name")
    if len(value) > MAX_NAME_LENGTH:
        raise InvalidTaskData(f"must be at most {MAX_NAME_LENGTH} characters", field="name")
    if not _NAME.match(value):
        raise InvalidTaskData("must not contain whitespace or control characters", field="name")
    return value


def step_name(value: object, field: str = "step") -> str:
    """A step's name: 1 to 200 characters, no control characters (spaces allowed)."""
    if not isinstance(value, str) or not value:
        raise InvalidTaskData("a step's name must be a non-empty string", field=field)
    if len(value) > MAX_NAME_LENGTH:
        raise InvalidTaskData(
            f"a step's name must be at most {MAX_NAME_LENGTH} characters", field=field
        )
    if _CONTROL.search(value):
        raise InvalidTaskData("a step's name must not contain control characters", field=field)
    return value


def label(value: object, field: str) -> str | None:
    """An optional short identifier: owner, context id."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise InvalidTaskData("must be a non-empty string or None", field=field)
    if len(value) > MAX_LABEL_LENGTH:
        raise InvalidTaskData(f"must be at most {MAX_LABEL_LENGTH} characters", field=field)
    if "\x00" in value:
        raise InvalidTaskData(_NUL_MESSAGE, field=field)
    return value


def worker_id(value: object) -> str:
    """The id of the worker that claims, holds or fences a lease."""
    checked = label(value, "worker_id")
    if checked is None:
        raise InvalidTaskData("must be a non-empty string", field="worker_id")
    return checked


def message(value: object, field: str = "status_message") -> str | None:
    """An optional human-readable text."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidTaskData("must be a string or None", field=field)
    if len(value) > MAX_MESSAGE_LENGTH:
        raise InvalidTaskData(f"must be at most {MAX_MESSAGE_LENGTH} characters", field=field)
    if "\x00" in value:
        raise InvalidTaskData(_NUL_MESSAGE, field=field)
    return value


def json_value(value: object, field: str, max_bytes: int) -> JsonValue:
    """A JSON value (no NaN or infinity) no larger than ``max_bytes`` as compact UTF-8 JSON.

    ``value`` is JSON when pydantic-core's encoder and parser, both in Rust,
    give it back equal: a tuple comes back a list, a non-string key a string,
    NaN never equals itself, and a set, bytes or an object do not encode at
    all. What comes back (JSON's own types, a fresh copy) is what is kept.
    It nests at most :data:`MAX_NESTING` levels. A large document of few lists
    and objects is decided by pydantic's validator instead, to the same effect
    (see :mod:`queuestore.core.large_json`).
    """
    try:
        encoded = to_json(value)
    except ValueError as exc:  # a type JSON lacks, a lone surrogate, a cycle
        raise InvalidTaskData(f"is not JSON: {_not_json(value, exc)}", field=field) from exc
    checked = (
        _validated(value, field)
        if large_json.applies(encoded, VALIDATOR_MAX_CONTAINERS)
        else _parsed(value, encoded, field)
    )
    # The encoding escapes a NUL as \u0000: only a text holding that can hold one.
    if b"\\u0000" in encoded and _holds_nul(checked):
        raise InvalidTaskData(_NUL_MESSAGE, field=field)
    size = len(encoded)
    if size > max_bytes:
        raise InvalidTaskData(
            f"is {size} bytes as JSON, over the limit of {max_bytes}", field=field
        )
    return checked


def json_object(value: object, field: str, max_bytes: int) -> dict[str, JsonValue]:
    """A JSON object (None means empty)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidTaskData(f"must be a JSON object, not {json_kind(value)}", field=field)
    checked = json_value(value if isinstance(value, dict) else dict(value), field, max_bytes)
    assert isinstance(checked, dict)
    return checked


def json_kind(value: object) -> str:
    """What ``value`` is, in JSON's words: "a string", "an array", "a number"..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, list | tuple):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    return f"a Python {type(value).__name__}"


def progress(value: object) -> float | None:
    """A fraction between 0 and 1, or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise InvalidTaskData("must be a number between 0 and 1 or None", field="progress")
    if not 0.0 <= value <= 1.0:
        raise InvalidTaskData(f"must be between 0 and 1, got {value}", field="progress")
    return float(value)


def status(value: object, field: str = "status") -> TaskStatus:
    """A known status, given as the enum or its string value."""
    try:
        return TaskStatus(value if isinstance(value, str) else "")
    except ValueError:
        known = ", ".join(s.value for s in TaskStatus)
        raise InvalidTaskData(f"unknown status {value!r}; one of {known}", field=field) from None


def ttl(value: object) -> timedelta | None:
    """How long a terminal task is kept: a non-negative timedelta or None.

    It is cut to whole milliseconds, the precision every store keeps.
    """
    if value is None:
        return None
    if not isinstance(value, timedelta) or value < timedelta(0):
        raise InvalidTaskData("must be a non-negative timedelta or None", field="ttl")
    return value - value % _MILLISECOND


def timeout(value: object, field: str = "timeout") -> timedelta | None:
    """How long a run may take: a positive timedelta (cut to whole milliseconds), or None."""
    if value is None:
        return None
    if not isinstance(value, timedelta) or value < _MILLISECOND:
        raise InvalidTaskData("must be a timedelta of a millisecond or more, or None", field=field)
    return value - value % _MILLISECOND


def instant(value: object, field: str) -> datetime | None:
    """An optional timezone-aware time, kept in UTC."""
    if value is None:
        return None
    try:
        return aware(value, field).astimezone(UTC)
    except OverflowError:
        raise InvalidTaskData("must be a time Python can hold in UTC", field=field) from None


def aware(value: object, field: str) -> datetime:
    """A timezone-aware datetime; naive ones are refused rather than guessed."""
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise InvalidTaskData(
            "must be a timezone-aware datetime, such as datetime.now(UTC) or "
            "datetime(2026, 12, 8, 2, 0, tzinfo=UTC); a naive one is refused, not guessed",
            field=field,
        )
    return value


def run_at(value: object, *, job: bool) -> datetime | None:
    """When a task's job may start: a timezone-aware datetime (kept in UTC), or None.

    A time in the past is a start at once. Only a job has one: a record
    (``job=False``) is run by whatever created it, not published.
    """
    if value is None:
        return None
    if not job:
        raise InvalidTaskData("only a job (job=True) has a start time", field="run_at")
    try:
        return aware(value, "run_at").astimezone(UTC)
    except OverflowError:  # an offset that pushes the first or last day out of range
        raise InvalidTaskData("must be a time Python can hold in UTC", field="run_at") from None


MAX_PRIORITY: Final = 9
"""The most urgent priority; 0, the default, is the least."""


def priority(value: object) -> int:
    """A task's priority: an integer from 0 to :data:`MAX_PRIORITY`."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_PRIORITY:
        raise InvalidTaskData(f"must be an integer from 0 to {MAX_PRIORITY}", field="priority")
    return value


TRACEPARENT_PATTERN = re.compile(r"^00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}$")
"""A W3C ``traceparent`` of version 00, trace and span ids not all zeros."""


def traceparent(value: object) -> str | None:
    """An optional W3C trace context (``00-<32 hex>-<16 hex>-<2 hex>``)."""
    if value is None:
        return None
    if not isinstance(value, str) or not TRACEPARENT_PATTERN.fullmatch(value):
        raise InvalidTaskData(
            "must be a W3C traceparent: 00-<32 hex>-<16 hex>-<2 hex>", field="traceparent"
        )
    return value


def limit(value: object) -> int:
    """A page size between 1 and 1000."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_PAGE_SIZE:
        raise InvalidTaskData(f"must be an integer from 1 to {MAX_PAGE_SIZE}", field="limit")
    return value


def positive_int(value: object, field: str) -> int:
    """A positive integer (batch sizes, versions)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidTaskData("must be a positive integer", field=field)
    return value


def flag(value: object, field: str) -> bool:
    """True or False, and nothing that merely converts to one (``"no"`` would be True)."""
    if not isinstance(value, bool):
        raise InvalidTaskData("must be True or False", field=field)
    return value


def record(model: type[M], value: object, field: str, max_bytes: int) -> M:
    """A pydantic record (``TaskError``, ``Artifact``) given as itself or a mapping."""
    try:
        checked = model.model_validate(value)
    except ValidationError as exc:
        raise InvalidTaskData(_first_error(exc), field=field) from exc
    json_value(checked.model_dump(mode="json"), field, max_bytes)
    return checked


def error(value: object, max_bytes: int) -> TaskError | None:
    """A failure description, or None to clear it."""
    return None if value is None else record(TaskError, value, "error", max_bytes)


def artifact(value: object, max_bytes: int) -> Artifact:
    """An artifact whose parts and metadata are JSON within the payload limit."""
    return record(Artifact, value, "artifact", max_bytes)


def _holds_nul(value: JsonValue) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any("\x00" in key or _holds_nul(item) for key, item in value.items())
    if isinstance(value, list):
        return any(_holds_nul(item) for item in value)
    return False


_WRAP_OPEN, _WRAP_CLOSE = b"[" * _READ_NESTING, b"]" * _READ_NESTING


def _parsed(value: object, encoded: bytes, field: str) -> JsonValue:
    """``value`` parsed back from its encoding, as deep down as a read will find it."""
    try:
        checked: JsonValue = from_json(_WRAP_OPEN + encoded + _WRAP_CLOSE, allow_inf_nan=False)
    except ValueError as exc:  # NaN or infinity, nested too deeply
        raise InvalidTaskData(f"is not JSON: {_not_json(value, exc)}", field=field) from exc
    for _ in range(_READ_NESTING):
        assert isinstance(checked, list)
        checked = checked[0]
    if checked != value:
        raise InvalidTaskData(f"is not JSON: {_not_json(value, None)}", field=field)
    return checked


def _validated(value: object, field: str) -> JsonValue:
    """``value`` as pydantic's ``JsonValue`` validator gives it back."""
    try:
        return large_json.validate(value)
    except ValidationError as exc:
        raise InvalidTaskData(
            f"is not JSON: {_first_error(exc, json_value=True)}", field=field
        ) from exc


def _not_json(value: object, failure: ValueError | None) -> str:
    """Why ``value`` is not JSON: where the validator finds it, else why the round trip failed."""
    try:
        large_json.validate(value)
    except ValidationError as exc:
        return _first_error(exc, json_value=True)
    except RecursionError:
        pass
    if _nesting(value) > MAX_NESTING:
        return f"nests deeper than {MAX_NESTING} levels"
    if failure is None:
        return "it does not come back equal from JSON"
    return str(failure).removeprefix("Error serializing to JSON: ")


def _nesting(value: object) -> int:
    """How many lists and dicts ``value`` holds one inside the other, at the deepest."""
    deepest, pending = 0, [(value, 1)]
    while pending:
        item, level = pending.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            pending.extend(
                (inner, level + 1) for inner in (item.values() if isinstance(item, dict) else item)
            )
    return deepest


def _first_error(exc: ValidationError, *, json_value: bool = False) -> str:
    """Where validation failed first, and why.

    ``json_value``: the ``JsonValue`` validator's error, whose location
    alternates the union's tags (dict, list, float...) and the keys.
    """
    first: Mapping[str, Any] = exc.errors()[0]
    loc = first.get("loc", ())
    where = ".".join(str(part) for part in (loc[1::2] if json_value else loc))
    return f"{where}: {first['msg']}" if where else str(first["msg"])
