"""The tasks methods and the ``tools/call`` interceptor, as an SDK extension.

One :class:`TasksExtension` serves ``io.modelcontextprotocol/tasks``
(SEP-2663) on 2026-07-28 requests and the 2025-11-25 ``tasks/*`` methods on
handshake connections: each method reads the request's protocol version and
answers in that era's shape, from the same row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import mcp_types as types
from mcp.server import ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.server.extension import Extension, MethodBinding
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_NAME_HEADER, decode_header_value

from queuestore import InvalidTransition, TaskStatus
from queuestore.mcp import wire

if TYPE_CHECKING:
    from queuestore.mcp.handshake import HandshakeEra
    from queuestore.mcp.task_core import TaskCore


class TasksExtension(Extension):
    """``io.modelcontextprotocol/tasks`` backed by queuestore; made by :class:`McpTasks`."""

    identifier = wire.EXTENSION_ID

    def __init__(self, tasks: TaskCore, handshake: HandshakeEra) -> None:
        self.tasks = tasks
        self.handshake = handshake

    @property
    def _poll_ms(self) -> int:
        return self.tasks.settings.poll_interval_ms

    def methods(self) -> Sequence[MethodBinding]:
        return [
            MethodBinding("tasks/get", wire.TaskIdParams, self.get),
            MethodBinding("tasks/cancel", wire.TaskIdParams, self.cancel),
            MethodBinding("tasks/update", wire.UpdateTaskParams, self.update),
            MethodBinding("tasks/result", wire.TaskIdParams, self.result),
            MethodBinding("tasks/list", types.PaginatedRequestParams, self.list),
        ]

    async def intercept_tool_call(
        self,
        params: types.CallToolRequestParams,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
    ) -> HandlerResult:
        """Calls of task tools: a task when the client speaks the extension, else wait.

        On 2026-07-28 the server decides: a tool that may run as a task does so
        for every client that declared the extension. A ``required`` tool
        refuses other clients (-32021 on 2026-07-28, -32601 on 2025-11-25).
        """
        tool = self.tasks.tools.get(params.name)
        if tool is None:
            return await call_next(ctx)
        modern = wire.is_modern(ctx.protocol_version)
        if modern and _declared(ctx) and tool.task_support != "forbidden":
            with wire.json_rpc_errors():
                task = await self.tasks.create(tool, params.arguments, None)
            return {"resultType": "task", **wire.sep_task(task, self._poll_ms, detailed=False)}
        if tool.task_support == "required":
            if modern:
                raise wire.missing_extension()
            raise MCPError(
                code=types.METHOD_NOT_FOUND,
                message=f"tool {tool.name!r} must be invoked as a task",
            )
        with wire.json_rpc_errors():
            return await self.tasks.call(tool, params.arguments)

    # -- methods of both eras -------------------------------------------------

    async def get(self, ctx: ServerRequestContext[Any, Any], params: Any) -> dict[str, Any]:
        """``tasks/get``: the task, with its outcome inlined on 2026-07-28."""
        modern = self._era(ctx, params.task_id)
        with wire.json_rpc_errors(params.task_id):
            task = await self.tasks.queue.store.get(params.task_id, owner=self.tasks.principal())
        if modern:
            return {"resultType": "complete", **wire.sep_task(task, self._poll_ms, detailed=True)}
        return wire.legacy_task(task, self._poll_ms)

    async def cancel(self, ctx: ServerRequestContext[Any, Any], params: Any) -> dict[str, Any]:
        """``tasks/cancel``: through ``TaskQueue.cancel`` (the job is revoked and stops).

        2025-11-25 refuses a terminal task (-32602) and answers the cancelled
        task; SEP-2663 acknowledges with an empty result either way.
        """
        modern = self._era(ctx, params.task_id)
        owner = self.tasks.principal()
        with wire.json_rpc_errors(params.task_id):
            try:
                task = await self.tasks.queue.cancel(
                    params.task_id, owner=owner, reason="cancelled by requestor"
                )
            except InvalidTransition:
                if not modern:
                    raise
                return {"resultType": "complete"}
        if modern:
            return {"resultType": "complete"}
        return wire.legacy_task(task, self._poll_ms)

    # -- 2026-07-28 only --------------------------------------------------------

    async def update(self, ctx: ServerRequestContext[Any, Any], params: Any) -> dict[str, Any]:
        """``tasks/update``: answers to the outstanding input request resume the job.

        Responses to keys that are not outstanding are ignored, as SEP-2663 asks.
        """
        if not self._era(ctx, params.task_id):
            raise MCPError(code=types.METHOD_NOT_FOUND, message="Method not found")
        owner = self.tasks.principal()
        with wire.json_rpc_errors(params.task_id):
            task = await self.tasks.queue.store.get(params.task_id, owner=owner)
            response = params.input_responses.get(wire.input_key(task))
            if task.status is TaskStatus.INPUT_REQUIRED and isinstance(response, dict):
                content = response.get("content")
                await self.tasks.answer(
                    task,
                    str(response.get("action", "cancel")),
                    content if isinstance(content, dict) else None,
                    owner,
                )
        return {"resultType": "complete"}

    # -- 2025-11-25 only ----------------------------------------------------------

    async def result(self, ctx: ServerRequestContext[Any, Any], params: Any) -> dict[str, Any]:
        """``tasks/result``: blocks until terminal; exactly the tool's ``CallToolResult``."""
        if self._era(ctx):
            raise MCPError(code=types.METHOD_NOT_FOUND, message="Method not found")
        return await self.handshake.result(ctx, params.task_id)

    async def list(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams
    ) -> dict[str, Any]:
        """``tasks/list``: the caller's tasks, newest first, on the store's keyset cursors.

        Root tasks only: the tasks the client created, not the child tasks their
        jobs spawned (each readable by ``tasks/get``).
        """
        if self._era(ctx):
            raise MCPError(code=types.METHOD_NOT_FOUND, message="Method not found")
        with wire.json_rpc_errors():
            page = await self.tasks.queue.store.list(
                owner=self.tasks.principal(),
                limit=self.tasks.settings.page_size,
                cursor=params.cursor,
                parent_id=None,
            )
        listed: dict[str, Any] = {
            "tasks": [wire.legacy_task(task, self._poll_ms) for task in page.tasks]
        }
        if page.next_cursor is not None:
            listed["nextCursor"] = page.next_cursor
        return listed

    def _era(self, ctx: ServerRequestContext[Any, Any], task_id: str | None = None) -> bool:
        """True on 2026-07-28, where the client must have declared the extension (-32021).

        There, over HTTP, an ``Mcp-Name`` routing header that names another task
        than ``params.taskId`` is refused (-32020), as SEP-2663 and SEP-2243 ask.
        """
        if not wire.is_modern(ctx.protocol_version):
            return False
        if not _declared(ctx):
            raise wire.missing_extension()
        headers = getattr(ctx.request, "headers", None)
        if task_id is not None and headers is not None:
            named = decode_header_value(headers.get(MCP_NAME_HEADER))
            if named is not None and named != task_id:
                raise MCPError(
                    code=types.HEADER_MISMATCH,
                    message=f"{MCP_NAME_HEADER} header does not match params.taskId",
                )
        return True


def _declared(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether this request's client declared the tasks extension."""
    capabilities = ctx.session.client_capabilities
    return bool(
        capabilities is not None
        and capabilities.extensions
        and wire.EXTENSION_ID in capabilities.extensions
    )
