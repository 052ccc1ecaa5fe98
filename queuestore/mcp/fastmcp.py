"""FastMCP 4.x: ``@mcp.tool(task=True)`` tools run as queuestore jobs (extra ``fastmcp``).

FastMCP core only declares which tools may run as tasks; it serves them once
some extension registers under ``io.modelcontextprotocol/tasks``. This one
does, in place of fastmcp-tasks' Docket engine::

    mcp = FastMCP("analytics")
    mcp.add_extension(QueuestoreTasks(app))     # app: the Celery app of a TaskQueue

    @mcp.tool(task=True)
    async def analyze(dataset: str) -> str: ...

A call from a client that declared the extension (2026-07-28, SEP-2663)
commits a task and returns ``resultType: "task"``; its job, ``fastmcp.call``,
runs the tool through ``FastMCP.call_tool`` on a Celery worker, which imports
the same module (server and app). ``tasks/get|update|cancel`` are served from
the store, so any replica answers and the task outlives the server process.
Other calls run as FastMCP runs them (in the server); a ``required`` tool
refuses clients without the extension (-32021).

Tools run on the worker without an MCP request: one that needs FastMCP's
request ``Context`` (sampling, elicitation, the HTTP request) cannot run there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from contextvars import ContextVar
from typing import Any, Final

import mcp_types as types
from celery import Celery
from fastmcp.server.context import Context
from fastmcp.server.extensions import MethodBinding, ServerExtension, ToolCallContinuation
from fastmcp.tools.base import ToolResult
from fastmcp.utilities.tasks import TASKS_EXTENSION_ID
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel

from queuestore import TaskContext, job
from queuestore.mcp import wire
from queuestore.mcp.client import CreatedTask
from queuestore.mcp.server_tasks import McpTasks
from queuestore.mcp.settings import McpSettings
from queuestore.mcp.tools import RESULT_IS_CALL_TOOL_RESULT

JOB: Final = "fastmcp.call"
"""The job that runs a FastMCP tool on a worker: input ``{"tool", "arguments"}``."""

MODERN: Final = frozenset({"2026-07-28"})

_ON_WORKER: ContextVar[bool] = ContextVar("queuestore_fastmcp_on_worker", default=False)


class QueuestoreTasks(ServerExtension):
    """The tasks extension for a FastMCP server, backed by queuestore and Celery.

    Args:
        app: the Celery app; the serving process must have made its
            ``TaskQueue(store, app)``, and the worker imports this module.
        settings: ttl, poll interval and principal (``QUEUESTORE_MCP_*``).
    """

    identifier = TASKS_EXTENSION_ID

    def __init__(self, app: Celery, *, settings: McpSettings | None = None) -> None:
        self.tasks = McpTasks(app, settings=settings)
        job(app, name=JOB)(self.run)

    def methods(self) -> Sequence[MethodBinding]:
        served = self.tasks.extension
        return [
            MethodBinding("tasks/get", wire.TaskIdParams, served.get, protocol_versions=MODERN),
            MethodBinding(
                "tasks/update", wire.UpdateTaskParams, served.update, protocol_versions=MODERN
            ),
            MethodBinding(
                "tasks/cancel", wire.TaskIdParams, served.cancel, protocol_versions=MODERN
            ),
        ]

    async def intercept_tool_call(
        self,
        params: types.CallToolRequestParams,
        context: Context,
        call_next: ToolCallContinuation,
    ) -> ToolResult | BaseModel:
        """A call of a task tool from a client that declared the extension becomes a task."""
        if _ON_WORKER.get():
            return await call_next()  # the job itself, running the tool
        tool = await context.fastmcp.get_tool(params.name)
        mode = tool.task_config.mode if tool is not None else "forbidden"
        if mode == "forbidden":
            return await call_next()
        request = context.request_context
        modern = request is not None and wire.is_modern(request.protocol_version)
        if modern and request is not None and _declared(request.session):
            with wire.json_rpc_errors():
                task = await self.tasks.submit(
                    JOB,
                    {"tool": params.name, "arguments": dict(params.arguments or {})},
                    None,
                    metadata={"mcp": {"tool": params.name, "result": RESULT_IS_CALL_TOOL_RESULT}},
                )
            shown = wire.sep_task(task, self.tasks.settings.poll_interval_ms, detailed=False)
            return CreatedTask.model_validate(shown, by_name=False)
        if mode == "required":
            if modern:
                raise wire.missing_extension()
            raise MCPError(
                code=types.METHOD_NOT_FOUND, message=f"tool {params.name!r} must run as a task"
            )
        return await call_next()

    def run(self, ctx: TaskContext, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """The job: call the tool on this server, here on the worker; store its result."""
        marker = _ON_WORKER.set(True)
        try:
            result = asyncio.run(self.server.call_tool(tool, arguments))
        finally:
            _ON_WORKER.reset(marker)
        shown = types.CallToolResult(
            content=result.content,
            structured_content=result.structured_content,
            is_error=result.is_error,
        )
        return shown.model_dump(by_alias=True, mode="json", exclude_none=True)


def _declared(session: Any) -> bool:
    capabilities = session.client_capabilities
    return bool(
        capabilities is not None
        and capabilities.extensions
        and wire.EXTENSION_ID in capabilities.extensions
    )
