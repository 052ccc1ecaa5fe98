"""MCP tasks on queuestore: tools whose calls become durable Celery jobs.

:class:`McpTasks` holds the task tools of one Celery app and serves them to MCP
clients of both protocol eras on the official SDK:

- 2025-11-25 (handshake connections): the ``tasks`` capability, task-augmented
  ``tools/call`` answered with ``CreateTaskResult`` once the task is committed
  and its job enqueued, ``tasks/get|result|list|cancel`` and
  ``notifications/tasks/status`` for every status change, whichever process
  wrote it (the store's change feed);
- 2026-07-28: the tasks extension ``io.modelcontextprotocol/tasks`` (SEP-2663),
  ``tasks/get|update|cancel`` and the flat ``resultType: "task"`` result.

Every verb passes the caller's principal to the store as the owner, so one
client never sees, waits on or cancels another's task. The rules (transitions,
owner filter, cursors, cancel) are the store's and the queue's.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import mcp_types as types
from celery import Celery
from mcp.server import MCPServer, Server, ServerRequestContext
from mcp.server.context import HandlerResult, ServerMiddleware
from mcp.server.extension import compose_tool_call_handler
from mcp.shared.exceptions import MCPError

from queuestore.mcp import wire
from queuestore.mcp.extension import TasksExtension
from queuestore.mcp.handshake import HandshakeEra
from queuestore.mcp.settings import McpSettings
from queuestore.mcp.task_core import TaskCore


class McpTasks(TaskCore):
    """The task tools of one Celery app, served over MCP.

    The MCP server process and the Celery worker import the module that makes
    it and declares the tools, so both register the same jobs::

        tasks = McpTasks(app)

        @tasks.tool(task_support="optional")
        def slow_add(ctx: TaskContext, a: int, b: int) -> int: ...

        # the low-level server, or MCPServer (its extensions fixed at construction)
        server = Server("demo", lifespan=tasks.lifespan)
        mcp = MCPServer("demo", extensions=[tasks.extension], lifespan=tasks.lifespan)
        tasks.attach(server)             # (or tasks.attach(mcp))

    Args:
        app: the Celery app the jobs run on; the serving process must also
            have made its ``TaskQueue(store, app)``.
        settings: ttl, poll interval, page size, principal of unauthenticated
            transports; by default read from ``QUEUESTORE_MCP_*``.
    """

    def __init__(self, app: Celery, *, settings: McpSettings | None = None) -> None:
        super().__init__(app, settings=settings)
        self.handshake = HandshakeEra(self)
        self.extension = TasksExtension(self, self.handshake)
        self.middleware: ServerMiddleware[Any] = self.handshake.middleware
        """The ``Server.middleware`` entry of the 2025-11-25 era (see :class:`HandshakeEra`)."""

    # -- serving -------------------------------------------------------------

    def attach(self, server: Server[Any] | MCPServer[Any]) -> None:
        """Serve the task tools and the task methods of both eras on ``server``.

        On a low-level ``Server`` this registers everything. An ``MCPServer``
        must have been built with ``extensions=[tasks.extension]`` (its
        extensions are fixed at construction); this adds :meth:`middleware`,
        which passing ``middleware=[tasks.middleware]`` to it does as well.
        """
        if isinstance(server, MCPServer):
            server.middleware.append(self.middleware)
            return
        for binding in self.extension.methods():
            server.add_request_handler(binding.method, binding.params_type, binding.handler)
        server.extensions[wire.EXTENSION_ID] = self.extension.settings()
        if server.get_request_handler("tools/list") is None:
            server.add_request_handler("tools/list", types.PaginatedRequestParams, _no_tools)
        existing = server.get_request_handler("tools/call")
        handler = existing.handler if existing is not None else _unknown_tool
        server.add_request_handler(
            "tools/call",
            types.CallToolRequestParams,
            compose_tool_call_handler([self.extension], handler),
        )
        server.middleware.append(self.middleware)

    async def aclose(self) -> None:
        """Stop the status notifiers of this process (they also end with their task)."""
        await self.handshake.aclose()

    @contextlib.asynccontextmanager
    async def lifespan(self, _server: object) -> AsyncIterator[dict[str, Any]]:
        """A server lifespan (``Server(..., lifespan=tasks.lifespan)``): the store opened
        on the server's event loop while it runs, so the task methods' store calls take
        no thread hop (see ``TaskStore.open_async``)."""
        async with self.queue.store.open():
            yield {}


async def _no_tools(
    ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[])


async def _unknown_tool(
    ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
) -> HandlerResult:
    raise MCPError(code=types.INVALID_PARAMS, message=f"unknown tool {params.name!r}")
