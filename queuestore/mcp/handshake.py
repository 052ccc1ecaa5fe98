"""The 2025-11-25 era (initialize handshake): what the SDK's handlers cannot return.

On handshake connections a client asks for a task with ``tools/call`` +
``task``; the answer is a ``CreateTaskResult``, which the SDK refuses from a
``tools/call`` handler (it checks the result against ``CallToolResult``), so
:class:`HandshakeEra` answers it from ``Server.middleware``, whose own result
is sent as it is. The same middleware declares the ``tasks`` capability in the
``initialize`` result and adds the task tools to ``tools/list``. It also keeps
the two long waits of this era: ``notifications/tasks/status`` for every
change of a task created on the connection, and ``tasks/result``, which asks
the client the job's questions as elicitations tied to the task.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any, Final, Protocol

import mcp_types as types
from mcp.server import ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from pydantic import ValidationError

from queuestore import Task, TaskNotFound, TaskStatus, new_task_id
from queuestore.mcp import wire

if TYPE_CHECKING:
    from queuestore.mcp.task_core import TaskCore

log = logging.getLogger(__name__)

TASKS_CAPABILITY: Final = types.ServerTasksCapability(
    list=types.TasksListCapability(),
    cancel=types.TasksCancelCapability(),
    requests=types.ServerTasksRequestsCapability(
        tools=types.TasksToolsCapability(call=types.TasksCallCapability())
    ),
)


class Changes(Protocol):
    """What a notifier reads from an open ``AsyncTaskStore.watch``."""

    async def get(self, timeout: float | None = None) -> Task | None: ...


class HandshakeEra:
    """Task-augmented calls, status notifications and ``tasks/result`` for :class:`McpTasks`."""

    def __init__(self, tasks: TaskCore) -> None:
        self.tasks = tasks
        self._watchers: set[asyncio.Task[None]] = set()

    async def aclose(self) -> None:
        """Stop the status notifiers of this process (they also end with their task)."""
        for watcher in list(self._watchers):
            watcher.cancel()
        await asyncio.gather(*self._watchers, return_exceptions=True)

    async def middleware(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        """Lists the task tools; declares and answers 2025-11-25 task requests.

        It adds the ``tasks`` capability to the ``initialize`` result and the
        task tools to ``tools/list``. The ``CreateTaskResult`` of a
        task-augmented ``tools/call`` is returned from here because the SDK
        checks a ``tools/call`` handler's result against ``CallToolResult`` and
        would refuse it; a middleware's own result is sent as it is.
        """
        if ctx.method == "initialize":
            return _with_tasks_capability(await call_next(ctx))
        if ctx.method == "tools/list":
            return self._with_task_tools(await call_next(ctx), ctx.protocol_version)
        if (
            ctx.method == "tools/call"
            and not wire.is_modern(ctx.protocol_version)
            and ctx.params is not None
            and ctx.params.get("task") is not None
        ):
            return await self._create_legacy(ctx)
        return await call_next(ctx)

    def _with_task_tools(self, result: HandlerResult, protocol_version: str) -> HandlerResult:
        """The listing (a wire dict by now) with the task tools on its last page."""
        if not isinstance(result, dict) or result.get("nextCursor") is not None:
            return result
        modern = wire.is_modern(protocol_version)
        ours = [
            tool.describe().model_dump(
                by_alias=True,
                mode="json",
                exclude_none=True,
                exclude={"execution"} if modern else set(),
            )
            for tool in self.tasks.tools.values()
        ]
        names = {shown["name"] for shown in ours}
        others = [shown for shown in result.get("tools", []) if shown.get("name") not in names]
        return {**result, "tools": others + ours}

    async def _create_legacy(self, ctx: ServerRequestContext[Any, Any]) -> dict[str, Any]:
        ttl_ms = wire.requested_ttl(ctx.params.get("task") if ctx.params is not None else None)
        try:
            params = types.CallToolRequestParams.model_validate(ctx.params, by_name=False)
        except ValidationError as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=_first_error(exc)) from None
        tool = self.tasks.tools.get(params.name)
        if tool is None or tool.task_support == "forbidden":
            raise MCPError(
                code=types.METHOD_NOT_FOUND,
                message=f"tool {params.name!r} does not support task-augmented calls",
            )
        # The watch opens before the task exists, so the notifier misses no change.
        task_id = new_task_id()
        watching = AsyncExitStack()
        with wire.json_rpc_errors():
            changes = await watching.enter_async_context(
                self.tasks.queue.store.watch(owner=self.tasks.principal(), task_ids={task_id})
            )
            try:
                task = await self.tasks.create(tool, params.arguments, ttl_ms, task_id=task_id)
            except BaseException:
                await watching.aclose()
                raise
        notifier = self._notify(ctx.session, task, changes, watching)
        watcher = asyncio.get_running_loop().create_task(notifier)
        self._watchers.add(watcher)
        watcher.add_done_callback(self._watchers.discard)
        return {"task": wire.legacy_task(task, self.tasks.settings.poll_interval_ms)}

    async def _notify(
        self, session: Any, task: Task, changes: Changes, watching: AsyncExitStack
    ) -> None:
        """Send ``notifications/tasks/status`` on each change until the task ends.

        ``changes`` was opened before the task was created. Best effort, as the
        spec allows: it stops when the session is gone.
        """
        shown = (wire.mcp_status(task), task.status_message)
        current = task
        try:
            async with watching:
                while not current.is_terminal:
                    change = await changes.get(timeout=wire.REFRESH_SECONDS)
                    if change is None:
                        current = await self.tasks.queue.store.get(task.id, owner=task.owner)
                    elif change.version > current.version:
                        current = change
                    now = (wire.mcp_status(current), current.status_message)
                    if now != shown:
                        shown = now
                        params = types.TaskStatusNotificationParams.model_validate(
                            wire.legacy_task(current, self.tasks.settings.poll_interval_ms),
                            by_name=False,
                        )
                        await session.send_notification(types.TaskStatusNotification(params=params))
        except asyncio.CancelledError:
            raise
        except TaskNotFound:
            return
        except Exception:
            log.debug("status notifications for task %s stopped", task.id, exc_info=True)

    async def result(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> dict[str, Any]:
        """Block until the task is terminal; return the tool's result with related-task ``_meta``.

        While the task waits for input, its question goes to the client as an
        elicitation over this request, tied to the task; the answer resumes it.
        A client that cannot be asked (no elicitation support, no channel back)
        keeps waiting until someone else answers or the task ends.
        """
        owner = self.tasks.principal()
        can_ask = True

        def settled(seen: Task) -> bool:
            return seen.is_terminal or (can_ask and seen.status is TaskStatus.INPUT_REQUIRED)

        with wire.json_rpc_errors(task_id):
            while True:
                task = await self.tasks.until(
                    task_id, owner, settled, timeout=self.tasks.settings.call_timeout_ms / 1000
                )
                if task.is_terminal:
                    return wire.tool_result_payload(task)
                if not settled(task):
                    raise MCPError(
                        code=types.INTERNAL_ERROR, message=f"task {task_id} is still running"
                    )
                can_ask = await self._ask(ctx, task, owner)

    async def _ask(
        self, ctx: ServerRequestContext[Any, Any], task: Task, owner: str | None
    ) -> bool:
        """Send the task's question as an elicitation; False if the client cannot answer."""
        request = types.ElicitRequest(
            params=types.ElicitRequestFormParams(
                message=task.status_message or "Input required",
                requested_schema=wire.ANSWER_SCHEMA,
                _meta={wire.RELATED_TASK: {"taskId": task.id}},
            )
        )
        try:
            answer = await ctx.session.send_request(
                request,
                types.ElicitResult,
                metadata=ServerMessageMetadata(related_request_id=ctx.request_id),
            )
        except MCPError as exc:  # the client refused, or there is no channel back (stateless)
            log.info("cannot ask the client about task %s (%s); waiting instead", task.id, exc)
            return False
        await self.tasks.answer(task, answer.action, answer.content, owner)
        return True


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    return f"invalid params: {where + ': ' if where else ''}{error['msg']}"


def _with_tasks_capability(result: HandlerResult) -> HandlerResult:
    """The ``initialize`` result (a wire dict by now) declaring the ``tasks`` capability."""
    if not isinstance(result, dict) or not isinstance(result.get("capabilities"), dict):
        return result
    declared = TASKS_CAPABILITY.model_dump(by_alias=True, mode="json", exclude_none=True)
    return {**result, "capabilities": {**result["capabilities"], "tasks": declared}}
