"""Client helpers for MCP tasks on the official SDK, which ships the types but no task calls.

- 2025-11-25: :class:`LegacyTasks` over a ``ClientSession`` whose
  ``JSONRPCDispatcher`` you built (the SDK checks a ``tools/call`` result
  against ``CallToolResult`` and would refuse a ``CreateTaskResult``, so the
  task-augmented call goes through the dispatcher's raw request).
- 2026-07-28: :class:`TasksClientExtension` for ``Client(..., extensions=[...])``
  (SEP-2663: a ``resultType: "task"`` result is claimed and, through
  ``Client.call_tool``, polled to its end), and the ``tasks/get|update|cancel``
  requests as typed models.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, Literal

import anyio
import mcp_types as types
from mcp.client import ClaimContext, ClientExtension, ClientSession, ResultClaim
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher

from queuestore.mcp.wire import EXTENSION_ID, TaskIdParams, UpdateTaskParams

MODERN: Final = frozenset({"2026-07-28"})
TERMINAL_STATUSES: Final = frozenset({"completed", "failed", "cancelled"})


class TaskFields(types.Result):
    """What every SEP-2663 task shows."""

    task_id: str
    status: Literal["working", "input_required", "completed", "failed", "cancelled"]
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None


class TaskState(TaskFields):
    """A SEP-2663 task as ``tasks/get`` shows it, outcome inlined."""

    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    input_requests: dict[str, Any] | None = None


class CreatedTask(TaskFields):
    """The flat ``CreateTaskResult`` of a ``tools/call`` the server made a task."""

    result_type: Literal["task"] = "task"


class GetTaskRequest(types.Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskIdParams
    name_param = "taskId"  # mirrored into Mcp-Name on HTTP, as SEP-2663 requires


class CancelTaskRequest(types.Request[TaskIdParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskIdParams
    name_param = "taskId"


class UpdateTaskRequest(types.Request[UpdateTaskParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    params: UpdateTaskParams
    name_param = "taskId"


Answerer = Callable[[str, Mapping[str, Any]], Awaitable[Mapping[str, Any]]]
"""Answers one input request: ``(key, request) -> response`` (``{"action", "content"}``)."""


async def get_task(session: ClientSession, task_id: str) -> TaskState:
    """``tasks/get``."""
    request = GetTaskRequest(params=TaskIdParams(task_id=task_id))
    return await session.send_request(request, TaskState)


async def cancel_task(session: ClientSession, task_id: str) -> None:
    """``tasks/cancel`` (an acknowledgement; the task may end later)."""
    await session.send_request(
        CancelTaskRequest(params=TaskIdParams(task_id=task_id)), types.Result
    )


async def update_task(
    session: ClientSession, task_id: str, input_responses: Mapping[str, Any]
) -> None:
    """``tasks/update``: answers to the task's outstanding input requests."""
    params = UpdateTaskParams(task_id=task_id, input_responses=dict(input_responses))
    await session.send_request(UpdateTaskRequest(params=params), types.Result)


async def poll_task(
    session: ClientSession, task_id: str, *, answer: Answerer | None = None
) -> TaskState:
    """Poll ``tasks/get`` at the server's interval until the task ends.

    Input requests go to ``answer`` once each (keys are never reused); without
    it the task is cancelled, since nobody can answer.
    """
    answered: set[str] = set()
    while True:
        state = await get_task(session, task_id)
        if state.status in TERMINAL_STATUSES:
            return state
        if state.status == "input_required":
            pending = {
                key: request
                for key, request in (state.input_requests or {}).items()
                if key not in answered
            }
            if pending and answer is None:
                await cancel_task(session, task_id)
            elif pending and answer is not None:
                responses = {
                    key: dict(await answer(key, request)) for key, request in pending.items()
                }
                answered.update(responses)
                await update_task(session, task_id, responses)
                continue
        await anyio.sleep((state.poll_interval_ms or 1000) / 1000)


class TasksClientExtension(ClientExtension):
    """Declares ``io.modelcontextprotocol/tasks`` and claims ``resultType: "task"`` results.

    ``Client.call_tool`` then returns the tool's ``CallToolResult`` after
    polling the task; ``session.call_tool(..., allow_claimed=True)`` returns the
    :class:`CreatedTask` itself.
    """

    identifier = EXTENSION_ID

    def __init__(self, *, answer: Answerer | None = None) -> None:
        self.answer = answer

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return [
            ResultClaim(
                result_type="task",
                model=CreatedTask,
                resolve=self.resolve,
                protocol_versions=MODERN,
            )
        ]

    async def resolve(self, created: CreatedTask, ctx: ClaimContext) -> types.CallToolResult:
        final = await poll_task(ctx.session, created.task_id, answer=self.answer)
        if final.result is not None:
            return types.CallToolResult.model_validate(final.result)
        reason = (final.error or {}).get("message") or final.status_message or final.status
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=str(reason))], is_error=True
        )


class LegacyTasks:
    """2025-11-25 task calls over a session and the dispatcher it was built on.

    Example::

        dispatcher = JSONRPCDispatcher(read, write)
        async with ClientSession(dispatcher=dispatcher) as session:
            await session.initialize()
            tasks = LegacyTasks(session, dispatcher)
            task = await tasks.create("slow_add", {"a": 1, "b": 2}, ttl_ms=60_000)
            result = await tasks.result(task.task_id)
    """

    def __init__(self, session: ClientSession, dispatcher: JSONRPCDispatcher) -> None:
        self.session = session
        self.dispatcher = dispatcher

    async def create(
        self, name: str, arguments: Mapping[str, Any] | None = None, *, ttl_ms: int | None = None
    ) -> types.Task:
        """A task-augmented ``tools/call``; returns the created task."""
        task: dict[str, Any] = {} if ttl_ms is None else {"ttl": ttl_ms}
        raw = await self.dispatcher.send_raw_request(
            "tools/call", {"name": name, "arguments": dict(arguments or {}), "task": task}
        )
        return types.CreateTaskResult.model_validate(raw, by_name=False).task

    async def get(self, task_id: str) -> types.GetTaskResult:
        """``tasks/get``."""
        request = types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id))
        return await self.session.send_request(request, types.GetTaskResult)

    async def result(self, task_id: str) -> types.CallToolResult:
        """``tasks/result``: blocks until the task ends."""
        request = types.GetTaskPayloadRequest(
            params=types.GetTaskPayloadRequestParams(task_id=task_id)
        )
        return await self.session.send_request(request, types.CallToolResult)

    async def list(self, cursor: str | None = None) -> types.ListTasksResult:
        """``tasks/list``, one page."""
        request = types.ListTasksRequest(params=types.PaginatedRequestParams(cursor=cursor))
        return await self.session.send_request(request, types.ListTasksResult)

    async def cancel(self, task_id: str) -> types.CancelTaskResult:
        """``tasks/cancel``."""
        request = types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id))
        return await self.session.send_request(request, types.CancelTaskResult)
