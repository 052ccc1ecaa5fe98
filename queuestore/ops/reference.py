"""The configuration reference, generated from :class:`~queuestore.config.Settings`.

``queuestore config reference > docs/reference/configuration.md`` writes it; a test fails
when the committed page differs from what the settings object says today.
"""

from __future__ import annotations

import json
import re
import types
import typing
from datetime import timedelta
from enum import Enum
from pathlib import Path
from typing import Any, Literal

from pydantic import SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from queuestore.config import MASK, Settings, mask_url_passwords

_HEADER = """\
# Configuration reference

<!-- Generated from queuestore.config.Settings by `queuestore config reference`.
     Do not edit: change the settings' descriptions and regenerate. -->

Every setting is read from the environment variable `QUEUESTORE_<NAME>` (or
given to `Settings(...)` in code). Durations take seconds (`30`, `0.5`) or ISO
8601 (`PT30S`); booleans take `true`/`false`; JSON objects are written as JSON.
`queuestore config show` prints the values a process would use, secrets and the
passwords in URLs hidden (`postgresql://app:********@db/q`), as does the
settings object's `repr`.
Worked examples of each variable are in `deploy/queuestore.env.example`.

| Variable | Type | Default | Description |
|---|---|---|---|
"""


def configuration_reference() -> str:
    """The Markdown page: one table row per setting, in declaration order."""
    rows = [
        f"| `QUEUESTORE_{name.upper()}` | {_type(field.annotation)} | {_default(field)} "
        f"| {_escape(field.description or '')} |"
        for name, field in Settings.model_fields.items()
    ]
    return _HEADER + "\n".join(rows) + "\n"


def effective_settings(settings: Settings) -> dict[str, Any]:
    """The settings as JSON-ready values, secrets and URL passwords replaced by ``"********"``."""
    values: dict[str, Any] = {}
    for name in Settings.model_fields:
        value = getattr(settings, name)
        if name == "http_tokens" and value:
            value = f"{MASK} ({len(value)} tokens)"
        values[name] = _plain(value)
    return values


def _plain(value: Any) -> Any:
    if isinstance(value, SecretStr):
        return MASK
    if isinstance(value, str) and "://" in value:
        return mask_url_passwords(value)
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Enum):
        return value.value
    return value


def _type(annotation: Any) -> str:
    args = typing.get_args(annotation)
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _type(args[0])
    if origin in (typing.Union, types.UnionType):
        kinds = [_type(arg) for arg in args if arg is not type(None)]
        return " or ".join(kinds) + (", optional" if type(None) in args else "")
    if origin is Literal:
        return " \\| ".join(f"`{arg}`" for arg in args)
    if origin is dict:
        return "JSON object"
    return {
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
        Path: "path",
        timedelta: "duration",
        SecretStr: "secret string",
    }.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if value is None:
        return "unset"
    plain = _plain(value)
    if isinstance(plain, float) and isinstance(value, timedelta):
        plain = int(plain) if plain.is_integer() else plain
    text = json.dumps(plain) if isinstance(plain, dict | list | bool) else str(plain)
    return f"`{text}`"


def _escape(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


# -- the Python API reference ---------------------------------------------------

_API_HEADER = """\
# Python API reference

<!-- Generated from the docstrings of the names queuestore/__init__.py exports, by
     `python -m queuestore.ops.reference python-api`. Do not edit: change the
     docstrings and regenerate. -->

The names `queuestore` exports (`from queuestore import ...`), grouped, each
with its signature and docstring. The protocol adapters and the asyncio twins
live in their own modules: `queuestore.aio` (`AsyncTaskStore`,
`AsyncTaskQueue`, see [asyncio](../explanation/concepts.md#asyncio)),
`queuestore.http` ([HTTP API](http-api.md)), `queuestore.mcp` ([MCP](mcp.md))
and `queuestore.a2a` ([A2A](a2a.md)).
"""

_API_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Setting up", ("Settings", "make_engine", "SqlTaskStore", "InMemoryTaskStore")),
    ("The store", ("TaskStore",)),
    ("The queue and jobs", ("TaskQueue", "job", "Job", "Retry", "ConcurrencyLimits")),
    ("Inside a job", ("TaskContext", "InputRequested", "JobCancelled")),
    ("Tasks", ("Task", "TaskStatus", "TaskError", "Artifact", "TaskPage", "new_task_id")),
    ("Constants", ("ANY", "UNSET", "LIVE", "TERMINAL", "TRANSITIONS")),
    (
        "Errors",
        (
            "QueueStoreError",
            "TaskNotFound",
            "InvalidTransition",
            "TaskConflict",
            "LeaseLost",
            "InvalidTaskData",
            "InvalidCursor",
            "StoreUnavailable",
            "BrokerUnavailable",
        ),
    ),
)

_CONSTANTS = {
    "ANY": "The owner that sees every task (workers, the janitor, operators): pass "
    "`owner=ANY` for an unscoped read or write. `owner=None` is the anonymous caller, "
    "who sees only unowned tasks.",
    "UNSET": "The default of optional update arguments: a field given `UNSET` is left "
    "as it is (`None` clears it).",
    "LIVE": "The statuses that are not terminal.",
    "TERMINAL": "The terminal statuses: no write changes a task in one of them.",
    "TRANSITIONS": "The only table of allowed status changes; every compare-and-set of "
    "the store is derived from it. A live task may also be rewritten in its own status.",
}

_SECTION = re.compile(r"^(Args|Arguments|Attributes|Returns|Raises|Yields|Example|Examples):$")
_ROLE = re.compile(r":(?:class|func|meth|attr|data|mod|exc|obj):`~?([^`<]+?)(?: <[^>]+>)?`")


def python_api_reference() -> str:
    """The Markdown page of the public Python API, from the exported names' docstrings."""
    import queuestore

    exported = list(queuestore.__all__)
    grouped = [name for _, names in _API_GROUPS for name in names]
    groups = list(_API_GROUPS)
    rest = tuple(name for name in exported if name not in grouped)
    if rest:
        groups.append(("Other names", rest))
    documented = {name for name in exported if isinstance(getattr(queuestore, name), type)}
    out = [_API_HEADER]
    for title, names in groups:
        out.append(f"\n## {title}\n")
        for name in names:
            if name in exported:
                out.append(_api_entry(name, getattr(queuestore, name), documented))
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).rstrip("\n") + "\n"


def _api_entry(name: str, obj: Any, documented: set[str]) -> str:
    import enum
    import inspect

    from pydantic import BaseModel

    lines = [f"\n### `{name}`\n"]
    if name in _CONSTANTS:
        lines.append(_CONSTANTS[name] + "\n")
        lines.append(_constant_value(name, obj))
        return "\n".join(lines)
    if inspect.isfunction(obj):
        lines.append(f"```python\n{name}{_signature(obj)}\n```\n")
        lines.append(_docstring(obj))
        return "\n".join(lines)
    bases = ", ".join(
        base.__name__ for base in obj.__bases__ if base.__name__ not in {"object", "ABC"}
    )
    if issubclass(obj, BaseModel) and name != "Settings":
        lines.append(f"```python\nclass {name}(BaseModel)\n```\n")
    elif issubclass(obj, BaseException | enum.Enum | BaseModel):
        lines.append(f"```python\nclass {name}({bases})\n```\n")
    else:
        lines.append(f"```python\nclass {name}{_signature(obj)}\n```\n")
    lines.append(_docstring(obj))
    if issubclass(obj, enum.Enum):
        lines.append("Members: " + ", ".join(f"`{member.value}`" for member in obj) + ".\n")
    elif issubclass(obj, BaseModel) and name != "Settings":
        lines.append(_model_fields(obj))
    elif name == "Settings":
        lines.append(
            "Every field is a setting, read from `QUEUESTORE_<NAME>`: see the "
            "[configuration reference](configuration.md).\n"
        )
    if not issubclass(obj, BaseException) and not issubclass(obj, enum.Enum):
        lines.extend(_members(obj, documented))
    return "\n".join(lines)


def _members(cls: type, documented: set[str]) -> list[str]:
    import inspect

    skip = {"model_config", "model_fields", "model_computed_fields"}
    inherited = [klass for klass in cls.__mro__[1:] if klass.__name__ in documented]
    covered = {base for klass in inherited for base in klass.__mro__}
    owners = [
        klass
        for klass in cls.__mro__
        if klass.__module__.startswith("queuestore.")
        and klass not in covered
        and not (klass is not cls and klass.__name__.startswith("_"))
    ]
    seen: set[str] = set()
    out: list[str] = []
    for klass in owners:
        for attr, value in vars(klass).items():
            if attr.startswith("_") or attr in skip or attr in seen:
                continue
            seen.add(attr)
            title = f"#### {cls.__name__}.{attr}\n"
            if isinstance(value, property):
                out.extend([title, "A property.\n", _docstring(value.fget)])
            elif isinstance(value, classmethod | staticmethod):
                function = value.__func__
                code = f"{attr}{_signature(function, method=isinstance(value, classmethod))}"
                out.extend([title, f"```python\n{code}\n```\n", _docstring(function)])
            elif inspect.isfunction(value):
                code = f"{attr}{_signature(value, method=True)}"
                out.extend([title, f"```python\n{code}\n```\n", _docstring(value)])
    if inherited:
        names = ", ".join(f"`{base.__name__}`" for base in inherited)
        out.append(f"It has every method of {names} as well.\n")
    return out


def _signature(obj: Any, *, method: bool = False) -> str:
    import inspect

    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return "(...)"
    parameters = list(signature.parameters.values())
    if method and parameters and parameters[0].name in {"self", "cls"}:
        parameters = parameters[1:]
    parameters = [
        parameter.replace(annotation=_Raw(parameter.annotation))
        if isinstance(parameter.annotation, str)
        else parameter
        for parameter in parameters
    ]
    returned = signature.return_annotation
    signature = signature.replace(
        parameters=parameters,
        return_annotation=_Raw(returned) if isinstance(returned, str) else returned,
    )
    text = str(signature).replace("datetime.timedelta", "timedelta")
    return re.sub(r" at 0x[0-9a-f]+", "", text)


class _Raw(str):
    """An annotation kept as the source wrote it (its repr without quotes)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return str(self)


def _docstring(obj: Any) -> str:
    import inspect

    doc = inspect.getdoc(obj) or ""
    if not doc:
        return "(No docstring.)\n"
    out: list[str] = []
    in_section = False
    for line in doc.splitlines():
        text = _ROLE.sub(r"`\1`", line).replace("``", "`")
        if _SECTION.match(text.strip()):
            in_section = True
            out.append(f"\n**{text.strip()[:-1]}:**\n")
            continue
        if in_section:
            if not text.strip():
                in_section = False
                out.append("")
            elif text.startswith("    ") and not text.startswith("     "):
                item = text.strip()
                head, sep, tail = item.partition(": ")
                if sep and " " not in head.strip("*"):
                    out.append(f"- `{head}`: {tail}")
                else:
                    out.append(f"- {item}")
            else:
                out.append("  " + text.strip())
            continue
        out.append(text)
    return "\n".join(out).strip() + "\n"


def _model_fields(model: Any) -> str:
    described = any(field.description for field in model.model_fields.values())
    rows = ["| field | type |" + (" description |" if described else ""), "|---|---|"]
    rows[1] += "---|" if described else ""
    for field_name, field in model.model_fields.items():
        kind = "`" + _type_text(field.annotation).replace("|", "\\|") + "`"
        row = f"| `{field_name}` | {kind} |"
        rows.append(row + (f" {_escape(field.description or '')} |" if described else ""))
    return "\n".join(rows) + "\n"


def _type_text(annotation: Any) -> str:
    """An annotation as a reader writes it: ``float | None``, ``list[Artifact]``."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is type(None):
        return "None"
    if origin is typing.Annotated:
        return _type_text(args[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_text(arg) for arg in args)
    if origin is Literal:
        return "Literal[" + ", ".join(repr(arg) for arg in args) + "]"
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[" + ", ".join(_type_text(arg) for arg in args) + "]"
    return getattr(annotation, "__name__", str(annotation))


def _constant_value(name: str, value: Any) -> str:
    from queuestore.core.models import TaskStatus

    order = list(TaskStatus)
    if name == "TRANSITIONS":
        rows = ["| from | to |", "|---|---|"]
        for status in order:
            targets = sorted(value.get(status, ()), key=order.index)
            shown = ", ".join(f"`{target.value}`" for target in targets) or "(none: terminal)"
            rows.append(f"| `{status.value}` | {shown} |")
        return "\n".join(rows) + "\n"
    if isinstance(value, frozenset):
        return "Value: " + ", ".join(f"`{s.value}`" for s in sorted(value, key=order.index)) + ".\n"
    return ""


if __name__ == "__main__":
    import sys

    pages = {"configuration": configuration_reference, "python-api": python_api_reference}
    if len(sys.argv) != 2 or sys.argv[1] not in pages:
        sys.exit(f"usage: python -m queuestore.ops.reference {{{'|'.join(pages)}}}")
    sys.stdout.write(pages[sys.argv[1]]())
