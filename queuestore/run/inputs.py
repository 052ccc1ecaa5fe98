"""A job's input, checked against its function's parameters and their annotations.

A job is called as ``function(ctx, **input)``. :class:`JobInput` builds, once per
job, a pydantic model of the parameters after ``ctx`` (each annotation, each
default) and validates an input with it, as ``pydantic.validate_call`` would:
an unknown or missing argument, or a value that does not fit its annotation
(``{"month": 5}`` for ``month: str``), raises ``InvalidTaskData`` whose field
names it (``input.month``). The callers' side checks an input before the task
is written; the worker checks it again before the run and passes the function
the validated values (see :meth:`JobInput.arguments`).

An annotation that cannot be resolved or that pydantic cannot validate (a name
defined inside a function, a class that is not a model or a dataclass) takes
any value, as without it.
"""

from __future__ import annotations

import inspect
import threading
import typing
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, create_model

from queuestore.core.errors import InvalidTaskData

_KEYWORDS = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


class JobInput:
    """The input ``function(ctx, **input)`` takes, for the job named ``job``."""

    def __init__(self, function: Callable[..., Any], job: str) -> None:
        self.function = function
        self.job = job
        self._model: type[BaseModel] | None = None
        self._building = threading.Lock()

    def arguments(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        """The keyword arguments for ``payload``: the values validated, as the function gets them.

        Only the arguments ``payload`` gives are returned (the function's own
        defaults stand for the others). A value is the one pydantic's lax
        mode gives for its annotation: ``"2026-11-01"`` for a ``date``
        parameter is a ``date``, a JSON object for a model parameter is the
        model, and a value the annotation already describes is passed as it is.

        Raises:
            InvalidTaskData: an unknown or missing argument, or a value that does
                not fit its annotation; ``field`` names it (``input.month``).
        """
        model = self._built()
        try:
            checked = model.model_validate(payload)
        except ValidationError as exc:
            raise _refusal(exc, self.job) from None
        given = {
            info.alias or name: getattr(checked, name)
            for name, info in type(checked).model_fields.items()
            if name in checked.model_fields_set
        }
        return given | (checked.__pydantic_extra__ or {})

    def json_schema(self, ref_template: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """The JSON Schema of the input :meth:`arguments` accepts, and the definitions its
        ``$ref``s name (each a ``ref_template`` with ``{model}``), kept apart."""
        schema = self._built().model_json_schema(by_alias=True, ref_template=ref_template)
        definitions = schema.pop("$defs", {})
        schema.pop("title", None)
        return schema, definitions

    def _built(self) -> type[BaseModel]:
        # Built at first use, not at registration: annotations may name types
        # defined after the job in its module.
        if self._model is None:
            with self._building:
                if self._model is None:
                    self._model = _model_of(self.function, self.job)
        return self._model


def _model_of(function: Callable[..., Any], job: str) -> type[BaseModel]:
    """The model of ``function``'s parameters after the first (the context)."""
    parameters = list(inspect.signature(function).parameters.values())[1:]
    hints = _hints(function, parameters)
    fields: dict[str, Any] = {}
    extra: typing.Literal["allow", "forbid"] = "forbid"
    for index, parameter in enumerate(parameters):
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            extra = "allow"
        elif parameter.kind in _KEYWORDS:
            default = ... if parameter.default is inspect.Parameter.empty else parameter.default
            # Named by position, aliased by name: any parameter name is a valid key
            # (``_private``, ``model_config``), and errors name the parameter.
            annotation = hints.get(parameter.name, Any)
            fields[f"p{index}"] = (annotation, Field(default, alias=parameter.name))
    config = ConfigDict(extra=extra, protected_namespaces=())
    return create_model(f"Input of {job}", __config__=config, **fields)


def _hints(function: Callable[..., Any], parameters: list[inspect.Parameter]) -> dict[str, Any]:
    """Each parameter's annotation resolved, where pydantic can validate it."""
    try:
        resolved = typing.get_type_hints(function, include_extras=True)
    except Exception:  # a name the module does not define: resolve each alone
        resolved = {}
        for parameter in parameters:
            try:
                resolved[parameter.name] = _resolve(function, parameter.annotation)
            except Exception:
                continue
    hints = {}
    for parameter in parameters:
        if parameter.name in resolved and _validates(resolved[parameter.name]):
            hints[parameter.name] = resolved[parameter.name]
    return hints


def _resolve(function: Callable[..., Any], annotation: Any) -> Any:
    if annotation is inspect.Parameter.empty:
        return Any
    if isinstance(annotation, str):
        namespace = getattr(function, "__globals__", {})
        return eval(annotation, dict(namespace))  # as typing.get_type_hints does
    return annotation


def _validates(annotation: Any) -> bool:
    """Whether pydantic validates ``annotation`` (an arbitrary class it does not)."""
    try:
        TypeAdapter(annotation)
    except Exception:
        return False
    return True


def _refusal(exc: ValidationError, job: str) -> InvalidTaskData:
    """The first error of ``exc`` as InvalidTaskData, its field the argument's path."""
    errors = exc.errors(include_url=False, include_input=False)
    first = errors[0]
    path = ".".join(str(part) for part in first["loc"])
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return InvalidTaskData(
        f"does not fit job {job!r}: {first['msg']}{more}",
        field=f"input.{path}" if path else "input",
    )
