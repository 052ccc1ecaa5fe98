"""The configuration reference, generated from :class:`~queuestore.config.Settings`.

``queuestore config reference > docs/reference/configuration.md`` writes it; a test fails
when the committed page differs from what the settings object says today.
"""

from __future__ import annotations

import json
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
