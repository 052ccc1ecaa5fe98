"""Task tools: an MCP tool whose body is a queuestore job.

The function is registered twice from one definition: as a ``@job`` on the
Celery app (the worker runs it) and as an MCP tool description (the server
lists it). Its signature, without the leading :class:`TaskContext`, is the
tool's input schema; the worker validates the stored input against the same
model, so the function receives the types it declares.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_type_hints

import mcp_types as types
from celery import Celery
from pydantic import BaseModel, ConfigDict, ValidationError, create_model
from pydantic_core import to_jsonable_python

from queuestore import Job, Task, TaskContext, TaskStatus, job

TaskSupport = Literal["optional", "required", "forbidden"]
"""Whether a tool may (``optional``), must (``required``) or may not run as an MCP task."""


class InvalidArguments(ValueError):
    """The arguments of a tools/call do not fit the tool's input schema."""


@dataclass(frozen=True)
class TaskTool:
    """One tool: its MCP description and the queuestore job that runs it."""

    name: str
    title: str | None
    description: str | None
    task_support: TaskSupport
    arguments: type[BaseModel]
    job: Job

    def input_schema(self) -> dict[str, Any]:
        """The JSON schema of the tool's arguments."""
        return self.arguments.model_json_schema()

    def describe(self) -> types.Tool:
        """The tool as ``tools/list`` shows it, with ``execution.taskSupport``."""
        return types.Tool(
            name=self.name,
            title=self.title,
            description=self.description,
            input_schema=self.input_schema(),
            execution=types.ToolExecution(task_support=self.task_support),
        )

    def check(self, arguments: Mapping[str, Any] | None) -> dict[str, Any]:
        """Validate ``arguments``; return them as the JSON the task stores.

        Raises:
            InvalidArguments: the arguments do not fit the schema (the message
                lists the offending fields, never a stack trace).
        """
        try:
            parsed = self.arguments.model_validate(dict(arguments or {}))
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(part) for part in error['loc']) or 'arguments'}: {error['msg']}"
                for error in exc.errors()
            )
            message = f"invalid arguments for tool {self.name!r}: {problems}"
            raise InvalidArguments(message) from None
        return parsed.model_dump(mode="json")


def make_task_tool(
    app: Celery,
    function: Callable[..., Any],
    *,
    name: str | None,
    title: str | None,
    description: str | None,
    task_support: TaskSupport,
    celery_options: Mapping[str, Any],
) -> TaskTool:
    """Register ``function(ctx, **arguments)`` as a job on ``app`` and describe it as a tool."""
    if task_support not in ("optional", "required", "forbidden"):
        raise ValueError(f"task_support must be optional, required or forbidden: {task_support!r}")
    tool_name = name or function.__name__
    arguments = arguments_model(function, tool_name)
    fields = tuple(arguments.model_fields)

    def body(ctx: TaskContext, **stored: Any) -> Any:
        parsed = arguments.model_validate(stored)
        values = {field: getattr(parsed, field) for field in fields}
        value = function(ctx, **values)
        if inspect.iscoroutine(value):
            value = asyncio.run(value)
        return to_jsonable_python(value)

    body.__name__ = body.__qualname__ = function.__name__
    body.__module__ = function.__module__
    body.__doc__ = function.__doc__
    body.__wrapped__ = function  # type: ignore[attr-defined]  # signature() shows the tool's
    registered = job(app, name=f"mcp.{tool_name}", **celery_options)(body)
    return TaskTool(
        name=tool_name,
        title=title,
        description=description if description is not None else inspect.getdoc(function),
        task_support=task_support,
        arguments=arguments,
        job=registered,
    )


def arguments_model(function: Callable[..., Any], tool_name: str) -> type[BaseModel]:
    """A pydantic model of the function's parameters after the first (the context).

    Raises:
        TypeError: the function takes no context, or has ``*args``/``**kwargs``.
    """
    parameters = list(inspect.signature(function).parameters.values())
    if not parameters:
        raise TypeError(f"tool {tool_name!r}: the first parameter must take the TaskContext")
    hints = get_type_hints(function)
    definitions: dict[str, Any] = {}
    for parameter in parameters[1:]:
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise TypeError(f"tool {tool_name!r}: *args and **kwargs have no schema")
        annotation = hints.get(parameter.name, Any)
        default = ... if parameter.default is parameter.empty else parameter.default
        definitions[parameter.name] = (annotation, default)
    model_name = "".join(part.capitalize() for part in tool_name.replace("-", "_").split("_"))
    return create_model(
        f"{model_name or 'Tool'}Arguments",
        __config__=ConfigDict(extra="forbid"),
        **definitions,
    )


RESULT_IS_CALL_TOOL_RESULT = "call_tool_result"
"""The ``metadata["mcp"]["result"]`` of a task whose job stores a whole ``CallToolResult``."""


def stores_call_tool_result(task: Task) -> bool:
    """Whether the task's result is a ``CallToolResult`` already."""
    shown = task.metadata.get("mcp")
    return isinstance(shown, dict) and shown.get("result") == RESULT_IS_CALL_TOOL_RESULT


def call_tool_result(task: Task) -> types.CallToolResult:
    """The ``CallToolResult`` a terminal task stands for.

    A completed task's result is the text (JSON unless it is a string) and,
    as ``structuredContent``, the object itself or ``{"result": value}``; a job
    that stored a whole ``CallToolResult`` (marked ``RESULT_IS_CALL_TOOL_RESULT``
    in the task's ``mcp`` metadata, as FastMCP tools do) gives it back as is. A
    failed, rejected or cancelled task is ``isError`` with its message only.
    """
    if task.status is TaskStatus.COMPLETED and stores_call_tool_result(task):
        return types.CallToolResult.model_validate(task.result, by_name=False)
    if task.status is TaskStatus.COMPLETED:
        value = task.result
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        structured = value if isinstance(value, dict) else {"result": value}
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)],
            structured_content=structured,
        )
    if task.status is TaskStatus.CANCELLED:
        message = f"task {task.id} was cancelled"
        if task.status_message:
            message += f": {task.status_message}"
    elif task.error is not None:
        message = task.error.message or task.error.type
    else:
        message = task.status_message or f"task {task.id} {task.status}"
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=message)], is_error=True
    )
