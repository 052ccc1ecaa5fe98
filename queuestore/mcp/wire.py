"""How queuestore tasks and errors look on the MCP wire, in both protocol eras.

2025-11-25 (handshake connections) shows a task as ``Task`` with ``ttl`` and
``pollInterval``; the tasks extension (SEP-2663, 2026-07-28) shows it flat with
``ttlMs`` and ``pollIntervalMs`` and inlines the result, the error or the
outstanding input requests. Both read the same row.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any, Final, NoReturn

import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import Field

from queuestore import (
    BrokerUnavailable,
    InvalidCursor,
    InvalidTaskData,
    InvalidTransition,
    StoreUnavailable,
    Task,
    TaskNotFound,
    TaskStatus,
)
from queuestore.mcp.tools import InvalidArguments, call_tool_result

log = logging.getLogger(__name__)

EXTENSION_ID: Final = "io.modelcontextprotocol/tasks"
"""The tasks extension (SEP-2663)."""

RELATED_TASK: Final = "io.modelcontextprotocol/related-task"
"""The ``_meta`` key tying a message to a task (2025-11-25)."""

REFRESH_SECONDS: Final = 5.0
"""Longest a waiter goes without re-reading its task (it may have been deleted meanwhile)."""

STATUS: Final[dict[TaskStatus, types.TaskStatus]] = {
    TaskStatus.SUBMITTED: "working",
    TaskStatus.WORKING: "working",
    TaskStatus.INPUT_REQUIRED: "input_required",
    TaskStatus.AUTH_REQUIRED: "input_required",
    TaskStatus.COMPLETED: "completed",
    TaskStatus.FAILED: "failed",
    TaskStatus.CANCELLED: "cancelled",
    TaskStatus.REJECTED: "failed",
}
"""queuestore status -> MCP task status."""

SERVER_FAILURES: Final = frozenset(
    {
        "WorkerLost",  # the reaper: the worker of every run died (QUEUESTORE_MAX_LOST_RUNS)
        "UnknownJob",  # the worker that took the message has no such job
        "InvalidTaskData",  # the worker could not store what the job returned or reported
        "celery.exceptions.SoftTimeLimitExceeded",  # the job's time limit stopped it
    }
)
"""The error types of a failed task that the server failed, not the tool.

They are the protocol's errors: the tool did not get to answer. Any other
type is what the job raised (an exception of queuestore's own that a job
raises carries its module, ``queuestore.core.errors.InvalidTaskData``), the tool's
error. A task is rejected by the server too.
"""

ANSWER_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {"answer": {"type": "string", "description": "Your answer."}},
    "required": ["answer"],
}
"""What an elicitation for ``ctx.request_input(prompt)`` asks for."""


class TaskIdParams(types.RequestParams):
    """Params of ``tasks/get``, ``tasks/result`` and ``tasks/cancel``."""

    task_id: str


class UpdateTaskParams(types.RequestParams):
    """Params of ``tasks/update`` (SEP-2663)."""

    task_id: str
    input_responses: dict[str, Any] = Field(default_factory=dict)


def is_modern(protocol_version: str) -> bool:
    """Whether a request speaks the per-request era (2026-07-28), where tasks are an extension."""
    return protocol_version in MODERN_PROTOCOL_VERSIONS


def iso(moment: datetime) -> str:
    """An ISO 8601 timestamp in UTC."""
    return moment.isoformat().replace("+00:00", "Z")


def ttl_ms(task: Task) -> int | None:
    """The task's retention in milliseconds; None when unlimited."""
    return None if task.ttl is None else int(task.ttl / timedelta(milliseconds=1))


def mcp_status(task: Task) -> types.TaskStatus:
    """The task's status as MCP names it."""
    return STATUS[task.status]


def legacy_task(task: Task, poll_interval_ms: int) -> dict[str, Any]:
    """The 2025-11-25 ``Task`` object (``ttl`` is present, null meaning unlimited)."""
    shown: dict[str, Any] = {
        "taskId": task.id,
        "status": mcp_status(task),
        "createdAt": iso(task.created_at),
        "lastUpdatedAt": iso(task.updated_at),
        "ttl": ttl_ms(task),
        "pollInterval": poll_interval_ms,
    }
    if task.status_message is not None:
        shown["statusMessage"] = task.status_message
    return shown


def input_key(task: Task) -> str:
    """The key of the task's outstanding input request: one per question, never reused."""
    return f"input-{len(task.answers)}"


def protocol_error(task: Task) -> dict[str, Any] | None:
    """The JSON-RPC error of a task the server failed or rejected; None for any other.

    A task the server failed has an error of a :data:`SERVER_FAILURES` type,
    which ``data.type`` names; a rejected one, its reason.
    """
    error = task.error
    if task.status is TaskStatus.FAILED and error is not None and error.type in SERVER_FAILURES:
        message = error.message or error.type
        return {"code": types.INTERNAL_ERROR, "message": message, "data": {"type": error.type}}
    if task.status is TaskStatus.REJECTED:
        reason = error.message if error is not None else task.status_message
        return {"code": types.INTERNAL_ERROR, "message": reason or "task rejected"}
    return None


def sep_task(task: Task, poll_interval_ms: int, *, detailed: bool) -> dict[str, Any]:
    """The SEP-2663 ``Task``; ``detailed`` inlines the result, error or input requests.

    A job that raised is a tool result with ``isError: true``, so its task is
    ``completed`` here: the extension keeps ``failed`` for protocol errors,
    which a task the server failed or rejected stands for (:func:`protocol_error`).
    """
    error = protocol_error(task)
    status = mcp_status(task)
    if task.status is TaskStatus.FAILED and error is None:
        status = "completed"
    shown: dict[str, Any] = {
        "taskId": task.id,
        "status": status,
        "createdAt": iso(task.created_at),
        "lastUpdatedAt": iso(task.updated_at),
        "ttlMs": ttl_ms(task),
        "pollIntervalMs": poll_interval_ms,
    }
    if task.status_message is not None:
        shown["statusMessage"] = task.status_message
    if not detailed:
        return shown
    if error is not None:
        shown["error"] = error
    elif task.status in (TaskStatus.COMPLETED, TaskStatus.FAILED):
        shown["result"] = call_tool_result(task).model_dump(
            by_alias=True, mode="json", exclude_none=True, exclude={"result_type"}
        )
    elif status == "input_required":
        shown["inputRequests"] = {
            input_key(task): {
                "method": "elicitation/create",
                "params": {
                    "mode": "form",
                    "message": task.status_message or "Input required",
                    "requestedSchema": ANSWER_SCHEMA,
                },
            }
        }
    return shown


def tool_result_payload(task: Task) -> dict[str, Any]:
    """``tasks/result``: exactly the tool's ``CallToolResult``, tied to the task in ``_meta``.

    Raises:
        MCPError: the task's :func:`protocol_error`: what the call would have answered.
    """
    raise_protocol_error(task)
    result = call_tool_result(task).model_dump(
        by_alias=True, mode="json", exclude_none=True, exclude={"result_type"}
    )
    result["_meta"] = {**result.get("_meta", {}), RELATED_TASK: {"taskId": task.id}}
    return result


def requested_ttl(task: object) -> int | None:
    """The retention a 2025-11-25 ``task`` field asks for, in milliseconds.

    The schema makes ``ttl`` an integer: a JSON number without a fractional
    part (``2500.0``) is one, anything else (``1.5``, ``true``, ``"5"``) is
    refused with -32602, and so is a ttl below 1 ms. ``null`` or no ttl: none
    requested.
    """
    ttl = task.get("ttl") if isinstance(task, dict) else None
    if ttl is None:
        return None
    whole = isinstance(ttl, int) or (isinstance(ttl, float) and ttl.is_integer())
    if isinstance(ttl, bool) or not whole:
        invalid_params(f"invalid params: task.ttl must be an integer of milliseconds, not {ttl!r}")
    if ttl < 1:
        invalid_params(f"invalid params: task.ttl must be at least 1 millisecond, not {ttl!r}")
    return int(ttl)


def raise_protocol_error(task: Task) -> None:
    """Raise the task's :func:`protocol_error`, if it has one.

    Raises:
        MCPError: the task was failed or rejected by the server.
    """
    error = protocol_error(task)
    if error is not None:
        raise MCPError(code=error["code"], message=error["message"], data=error.get("data"))


def invalid_params(message: str) -> NoReturn:
    raise MCPError(code=types.INVALID_PARAMS, message=message)


def not_found(task_id: str) -> NoReturn:
    """The one answer for unknown, foreign and expired ids: existence never leaks."""
    invalid_params(f"Failed to retrieve task: task {task_id} not found")


@contextmanager
def json_rpc_errors(task_id: str | None = None) -> Iterator[None]:
    """Translate queuestore errors into JSON-RPC errors with short messages.

    -32602 for what the caller got wrong (unknown, foreign or expired ids, bad
    cursors, bad arguments, a transition the task cannot make); -32603 for
    faults, with a reason and never a stack trace or SQL.
    """
    try:
        yield
    except MCPError:
        raise
    except TaskNotFound:
        not_found(task_id or "?")
    except InvalidCursor:
        invalid_params("invalid cursor")
    except (InvalidArguments, InvalidTaskData) as exc:
        invalid_params(str(exc))
    except InvalidTransition as exc:
        invalid_params(f"task {task_id} is already {STATUS[TaskStatus(exc.current)]}")
    except StoreUnavailable:
        log.warning("task store unavailable", exc_info=True)
        raise MCPError(code=types.INTERNAL_ERROR, message="task store unavailable") from None
    except BrokerUnavailable:
        log.warning("broker unavailable", exc_info=True)
        raise MCPError(code=types.INTERNAL_ERROR, message="broker unavailable") from None
    except Exception:
        log.exception("MCP tasks request failed")
        raise MCPError(code=types.INTERNAL_ERROR, message="internal error") from None


def missing_extension() -> MCPError:
    """-32021: the request needs the tasks extension the client did not declare."""
    return MCPError(
        code=types.MISSING_REQUIRED_CLIENT_CAPABILITY,
        message="Missing required client capability",
        data={"requiredCapabilities": {"extensions": {EXTENSION_ID: {}}}},
    )
